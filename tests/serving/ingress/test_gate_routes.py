"""The offline gate's management routes (``GET``/``POST /v1/adapters/{name}/gate``) in the gateway's
real app, keys on, over a real local S3 server (test_no_oracle's app and keys): only a key that may
promote the name is answered, before anything else of the request is read; a cleared candidate comes
with the name's policy; a decision promotes or is recorded; and ``maze-eval gate``'s client
(evaluation.gate.GatewayAliases) reads the same answers, errors as the serving errors they stand for."""

from __future__ import annotations

import asyncio
import dataclasses

import httpx
import pytest

from evaluation.gate import GatewayAliases
from serving.adapters import GateEvidence
from serving.errors import Forbidden, ParityNotMeasured
from tests.serving.ingress.test_no_oracle import OPS, A, B, call, env, serve  # noqa: F401 - env is a fixture
from tests.support.adapter_store import make_adapter

PASSED = {"ok": True, "frames": 4, "max_abs_diff": 0.004, "reference": "hf+peft"}


@pytest.fixture
def gated(env, tmp_path):
    """(config, store, served, candidate): team-b-z serves its first version; a second, pushed under it."""
    cfg, store = env
    served = store.resolve("team-b-z").version
    cand = store.push(make_adapter(tmp_path / "cand", seed=5), "team-b-z", base="maze-tiny", force=True).version
    store.promote("team-b-z", served)
    return cfg, store, served, cand


def evidence(against: str, verdict: str = "better") -> dict:
    return dataclasses.asdict(GateEvidence(
        verdict=verdict, against=against, wins=9, losses=0, seeds=16, looks="16/32/48/64", p_value=0.002,
        wins_needed=9, alpha=0.05, test="exact one-sided binomial", run="gate-cand", run_against="gate-served"))


def test_only_a_key_that_may_promote_the_name_is_answered(gated):
    cfg, store, served, cand = gated
    path = "/v1/adapters/team-b-z/gate"
    body = {"version": cand, "evidence": evidence(served)}
    inference, other_team, inference_post, unmeasured, malformed = call(cfg, [
        (A, "GET", path, {"params": {"version": cand}}),
        (B, "GET", "/v1/adapters/team-a-x/gate", {"params": {"version": "nope"}}),  # 403 before the 400
        (A, "POST", path, {"json": body}),
        (B, "GET", path, {"params": {"version": cand}}),
        (B, "POST", path, {"json": {"version": cand, "evidence": {**evidence(served), "wins": -1}}}),
    ])
    for refused in (inference, other_team, inference_post):
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "insufficient_permissions"
    assert unmeasured.status_code == 409 and unmeasured.json()["error"]["code"] == "adapter_parity_not_measured"
    assert malformed.status_code == 400 and "wins must be a count" in malformed.json()["error"]["message"]
    assert store.resolve("team-b-z").version == served and store.history("team-b-z")[0].action == "promote"

    store.record_parity("team-b-z", cand, PASSED)
    target, decided = call(cfg, [(B, "GET", path, {"params": {"version": cand}}), (B, "POST", path, {"json": body})])
    assert target.status_code == 200, target.text
    assert {k: target.json()[k] for k in ("version", "current", "parity")} == {
        "version": cand, "current": served, "parity": "ok 0.004"}
    assert target.json()["policy"] == {"alpha": 0.05, "seeds": "0-63", "looks": [16, 32, 48, 64], "min_discordant": 6}
    assert decided.status_code == 200, decided.text
    assert decided.json()["ref"]["version"] == cand and decided.json()["move"]["gate"]["against"] == served
    assert store.resolve("team-b-z").version == cand


def test_the_gates_client_reads_the_routes(gated):
    cfg, store, served, cand = gated

    async def scenario():
        app, _ = await serve(cfg)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            publisher = GatewayAliases("http://gateway/v1", B, client=client)
            with pytest.raises(ParityNotMeasured, match="no parity record"):
                await publisher.target("team-b-z", cand)
            await asyncio.to_thread(store.record_parity, "team-b-z", cand, PASSED)
            target = await publisher.target("team-b-z", cand)
            assert (target.current, target.policy.looks) == (served, [16, 32, 48, 64])
            with pytest.raises(Forbidden):
                await GatewayAliases("http://gateway/v1", A, client=client).target("team-b-z", cand)
            move = await publisher.decide("team-b-z", cand, GateEvidence(**evidence(served, "worse")))
            assert (move["action"], move["version"], move["gate"]["verdict"]) == ("gate", cand, "worse")
            admin = GatewayAliases("http://gateway/v1", OPS, client=client)
            assert (await admin.decide("team-b-z", cand, GateEvidence(**evidence(served))))["action"] == "promote"

    asyncio.run(scenario())
    assert store.resolve("team-b-z").version == cand
