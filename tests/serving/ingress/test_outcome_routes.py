"""The live guard's routes (``POST /v1/outcomes``, ``GET /v1/adapters/{name}/guard``) in the gateway's
real app, keys on, over a real local S3 server (test_no_oracle's app and keys): a key reports the
outcomes of models it may call and no others, bad bodies are 400s naming the field, an outcome the
split did not serve is answered as not counted, and the ledger is shown to keys that may see the name."""

from __future__ import annotations

import pytest

from serving.adapters import serves_canary
from tests.serving.ingress.test_no_oracle import OPS, A, B, call, env  # noqa: F401 - env is a fixture
from tests.support.adapter_store import make_adapter

PASSED = {"ok": True, "frames": 4, "max_abs_diff": 0.004, "reference": "hf+peft"}


@pytest.fixture
def guarded(env, tmp_path):
    """(config, store, stable, canary): team-a-x runs a second version as a 50% canary."""
    cfg, store = env
    stable = store.resolve("team-a-x").version
    cand = store.push(make_adapter(tmp_path / "cand", seed=5), "team-a-x", base="maze-tiny", force=True).version
    store.promote("team-a-x", stable)
    store.record_parity("team-a-x", cand, PASSED)
    store.canary("team-a-x", cand, 50)
    return cfg, store, stable, cand


def _session(store, canary: bool) -> str:
    running = store.resolve("team-a-x").canary
    return next(f"s{i}" for i in range(1000) if serves_canary("team-a-x", running, f"s{i}") == canary)


def test_a_key_reports_its_own_sessions_and_reads_the_ledger(guarded):
    cfg, store, stable, cand = guarded
    on_canary, on_stable = _session(store, True), _session(store, False)
    body = {"session": on_canary, "model": f"maze-tiny:team-a-x@{cand}", "solved": False, "duration_s": 3.0,
            "latency_s": 0.2}
    counted, again, elsewhere, other_team, ledger, hidden = call(cfg, [
        (A, "POST", "/v1/outcomes", {"json": body}),
        (A, "POST", "/v1/outcomes", {"json": body}),
        (A, "POST", "/v1/outcomes", {"json": {**body, "session": on_stable}}),
        (B, "POST", "/v1/outcomes", {"json": body}),  # team-b may not call team-a's names
        (A, "GET", "/v1/adapters/team-a-x/guard", {}),
        (B, "GET", "/v1/adapters/team-a-x/guard", {}),
    ])
    assert counted.status_code == 200, counted.text
    assert counted.json() == {"object": "outcome", "counted": True, "reason": "counted", "arm": "canary",
                              "decision": None}
    assert again.json()["counted"] is False and "counted already" in again.json()["reason"]
    assert elsewhere.json()["counted"] is False and "other version" in elsewhere.json()["reason"]
    assert other_team.status_code == 404 and other_team.json()["error"]["code"] == "model_not_found"
    assert ledger.status_code == 200
    shown = ledger.json()
    assert shown["policy"]["alpha_rollback"] == 0.05 and shown["ledger"]["canary"] == cand
    assert shown["ledger"]["evidence"]["canary_sessions"] == 1 and shown["ledger"]["evidence"]["canary_latency_s"] == 0.2
    assert hidden.status_code == 404 and "team-a-x" in hidden.json()["error"]["message"]
    # scope first: a malformed name outside the key's scope is the same 404, inside it a 400
    outside, inside = call(cfg, [(B, "GET", "/v1/adapters/team-a-x@00/guard", {}),
                                 (A, "GET", "/v1/adapters/team-a-x@00/guard", {})])
    assert outside.status_code == 404 and inside.status_code == 400


@pytest.mark.parametrize("change,field", [
    ({"solved": "maybe"}, "solved"),
    ({"latency_s": -1}, "latency_s"),
    ({"session": ""}, "session"),
    ({"extra": 1}, "extra"),
    ({"duration_s": None}, "duration_s"),
])
def test_a_bad_body_is_a_400_naming_the_field(guarded, change, field):
    cfg, store, stable, cand = guarded
    body = {"session": "s1", "model": f"maze-tiny:team-a-x@{cand}", "solved": True, "duration_s": 1.0, **change}
    (answer,) = call(cfg, [(A, "POST", "/v1/outcomes", {"json": body})])
    assert answer.status_code == 400 and field in answer.json()["error"]["message"]


def test_an_outcome_without_a_version_or_canary_is_answered_not_counted(guarded):
    cfg, store, stable, cand = guarded
    unversioned, no_canary = call(cfg, [
        (OPS, "POST", "/v1/outcomes", {"json": {"session": "s1", "model": "maze-tiny:team-a-x", "solved": True,
                                                "duration_s": 1.0}}),
        (OPS, "POST", "/v1/outcomes", {"json": {"session": "s1", "model": f"maze-tiny:team-a-y@{stable}",
                                                "solved": True, "duration_s": 1.0}}),
    ])
    assert unversioned.status_code == 400 and "names no adapter version" in unversioned.json()["error"]["message"]
    assert no_canary.status_code == 200 and no_canary.json()["counted"] is False
    assert "runs no canary" in no_canary.json()["reason"]


def test_a_names_policy_is_read_by_who_sees_it_and_changed_by_who_may_promote_it(guarded):
    cfg, store, stable, cand = guarded
    change = {"kind": "guard", "changes": {"promote": True}}
    read, inference, other_team, publisher, bad, after = call(cfg, [
        (A, "GET", "/v1/adapters/team-a-x/policy", {}),
        (A, "PUT", "/v1/adapters/team-a-x/policy", {"json": change}),  # an inference key may not
        (B, "PUT", "/v1/adapters/team-a-x/policy", {"json": change}),  # nor a publisher of other names
        (B, "PUT", "/v1/adapters/team-b-z/policy", {"json": change}),
        (B, "PUT", "/v1/adapters/team-b-z/policy", {"json": {"kind": "guard", "changes": {"alpha_promote": 3}}}),
        (OPS, "GET", "/v1/adapters/team-b-z/policy", {}),
    ])
    assert read.status_code == 200 and read.json()["guard"]["promote"] is False and read.json()["gate"]["alpha"] == 0.05
    for refused in (inference, other_team):
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "insufficient_permissions"
    assert publisher.status_code == 200 and publisher.json()["guard"]["promote"] is True
    assert bad.status_code == 400 and "alpha_promote" in bad.json()["error"]["message"]
    assert after.json()["changes"] == {"gate": {}, "guard": {"promote": True}}
    entry = store.history("team-b-z")[0]
    assert (entry.action, entry.by) == ("policy", "team-b")
