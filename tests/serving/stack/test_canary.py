"""Canaries on the real embedded gateway, with the official openai client: a 50/50 canary changes
what serves ``base:NAME`` (every response names its version), one session (an X-Session-Id, an
OpenAI ``user``, a request id, an agent's episode) stays on one version exactly as
``serving.adapters.canary`` computes it, /metrics counts the requests per version and arm, and
``maze-eval compare`` between runs pinned to the two versions gives a verdict."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter

import httpx
import pytest

from agent import EndpointConfig, RunnerConfig, SamplingParams
from agent.runner import EPISODE_SESSION, OpenAIPolicy, run_episodes_async
from evaluation import EvalConfig, Store, compare, evaluate
from serving.adapters import serves_canary
from tests.support.gateway_stack import KEY, image_messages  # the `stack` fixture lives in conftest.py

pytestmark = pytest.mark.slow
NAME = "canaried"
SESSIONS = 24


def served(stack, *, session: str | None = None, user: str | None = None, request_id: str | None = None) -> str:
    """The model the gateway reports for one 1-token request of ``base:NAME``."""
    headers = {k: v for k, v in {"X-Session-Id": session, "X-Request-Id": request_id}.items() if v}
    extra = {"user": user} if user else {}
    resp = stack.client.chat.completions.create(model=f"{stack.base}:{NAME}", messages=image_messages(), max_tokens=1,
                                                temperature=0, extra_headers=headers, **extra)
    return resp.model


@pytest.fixture(scope="module")
def canary(stack):
    """NAME serves v1, with v2 as a 50/50 canary; (v1, v2, the store's Canary)."""
    v1 = stack.push(stack.assets.extra[4], NAME).version
    v2 = stack.push(stack.assets.extra[5], NAME, force=True).version
    stack.store.promote(NAME, v1)
    ref = stack.store.canary(NAME, v2, 50)
    time.sleep(stack.cfg.adapters.resolve_ttl_s + 0.3)  # the gateway's name -> version cache
    return v1, v2, ref.canary


def version_of(model: str) -> str:
    return model.rpartition("@")[2]


def test_a_50_50_canary_splits_by_session(stack, canary):
    v1, v2, split = canary
    sessions = [f"session-{uuid.uuid4().hex[:8]}" for _ in range(SESSIONS)]
    first = {s: version_of(served(stack, session=s)) for s in sessions}
    expected = {s: v2 if serves_canary(NAME, split, s) else v1 for s in sessions}
    assert first == expected  # the gateway splits exactly as serving.adapters.canary computes
    assert set(first.values()) == {v1, v2}, Counter(first.values())
    # same session -> same version (the resolver's cache is warm now, and then expires)
    assert {s: version_of(served(stack, session=s)) for s in sessions[:8]} == {s: first[s] for s in sessions[:8]}
    time.sleep(stack.cfg.adapters.resolve_ttl_s + 0.3)
    assert {s: version_of(served(stack, session=s)) for s in sessions[8:16]} == {s: first[s] for s in sessions[8:16]}
    # the OpenAI `user` field and, without either, the request id key the split the same way
    for user in ("user-a", "user-b", "user-c"):
        want = v2 if serves_canary(NAME, split, user) else v1
        assert [version_of(served(stack, user=user)) for _ in range(2)] == [want, want]
    rid = "req-" + uuid.uuid4().hex[:8]
    assert version_of(served(stack, request_id=rid)) == (v2 if serves_canary(NAME, split, rid) else v1)
    # the model card names both arms; a pinned version is served as asked whatever the split
    card = stack.client.models.retrieve(f"{stack.base}:{NAME}").model_extra
    assert card["version"] == v1 and card["canary"] == {"version": v2, "weight": 50.0,
                                                        "versioned_id": f"{stack.base}:{NAME}@{v2}"}
    pinned = stack.client.chat.completions.create(model=f"{stack.base}:{NAME}@{v1}", messages=image_messages(),
                                                  max_tokens=1, extra_headers={"X-Session-Id": sessions[0]})
    assert pinned.model == f"{stack.base}:{NAME}@{v1}"


def test_an_agent_episode_stays_on_one_version(stack, canary):
    """The agent's client sends one X-Session-Id per episode: every turn of an episode is served by
    the version its session falls on, and the episode's record names that version."""
    v1, v2, split = canary
    turns: list[tuple[str, str]] = []

    class Recording(OpenAIPolicy):
        async def __call__(self, messages, sampling):
            reply = await super().__call__(messages, sampling)
            turns.append((EPISODE_SESSION.get(), reply.model))
            return reply

    policy = Recording(EndpointConfig(base_url=stack.base_url, api_key=KEY, model=f"{stack.base}:{NAME}"))
    cfg = RunnerConfig(max_turns=3, concurrency=4, sampling=SamplingParams(temperature=0, max_tokens=4))

    async def play():
        try:
            return await run_episodes_async(policy, range(12), cfg)
        finally:
            await policy.aclose()

    records = asyncio.run(play())
    by_session: dict[str, set[str]] = {}
    for session, model in turns:
        by_session.setdefault(session, set()).add(model)
    assert len(by_session) == 12 and all(len(models) == 1 for models in by_session.values()), by_session
    for session, (model,) in by_session.items():
        assert version_of(model) == (v2 if serves_canary(NAME, split, session) else v1)
    first_turn = {}
    for session, model in turns:
        first_turn.setdefault(session, model)
    assert sorted(r.model for r in records) == sorted(first_turn.values())
    assert all(r.stop_reason.value != "error" for r in records), [r.error for r in records]


def test_metrics_count_requests_per_version_and_arm(stack, canary):
    """/metrics: every request above to NAME counted under the version that served it; the canary
    counter's arms match (pinned requests are not split, so they count only per version)."""
    from prometheus_client.parser import text_string_to_metric_families

    from serving.local import embedded

    v1, v2, _ = canary
    url = embedded.status()["metrics_url"]

    def counts() -> tuple[dict, dict]:
        per_version, per_arm = Counter(), Counter()
        for family in text_string_to_metric_families(httpx.get(url, timeout=10).text):
            for s in family.samples:
                if s.labels.get("adapter") != NAME:
                    continue
                if s.name == "ray_maze_gateway_adapter_requests_total" and s.labels["status"] == "200":
                    per_version[s.labels["version"]] += s.value
                elif s.name == "ray_maze_gateway_canary_routes_total":
                    per_arm[(s.labels["arm"], s.labels["version"])] += s.value
        return per_version, per_arm

    deadline = time.monotonic() + 90
    while True:  # Ray's metrics agent exports every few seconds: counts catch up in steps
        per_version, per_arm = counts()
        ok = (per_arm[("stable", v1)] >= 10 and per_arm[("canary", v2)] >= 10 and not per_arm[("stable", v2)]
              and per_version[v1] >= per_arm[("stable", v1)] and per_version[v2] >= per_arm[("canary", v2)])
        if ok or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert ok, (per_version, per_arm)
    print(f"\nper version {dict(per_version)}; per arm {dict(per_arm)}")


def test_compare_tells_whether_the_canary_is_better(stack, canary, tmp_path):
    """Runs pinned to each version (what a canary evaluation does), then compare: A and B named by
    the version each served, and a verdict."""
    v1, v2, _ = canary
    db = str(tmp_path / "eval.sqlite")
    runs = [evaluate(EvalConfig(endpoint=stack.base_url, api_key=KEY, adapter=f"{NAME}@{v}", seeds="0-3", max_turns=2,
                                max_tokens=8, concurrency=2, db=db)) for v in (v1, v2)]
    assert [r.manifest.adapter_version for r in runs] == [v1, v2]
    c = compare(Store(db), runs[0].run_id, runs[1].run_id)
    assert (c.model_a, c.model_b) == (f"{stack.base}:{NAME}@{v1}", f"{stack.base}:{NAME}@{v2}")
    assert c.paired == 4 and c.verdict in ("a_better", "b_better", "no_difference")
    assert {r.model for r in Store(db).episode_records(runs[1].run_id)} == {f"{stack.base}:{NAME}@{v2}"}


def test_promote_and_abort_end_the_split(stack, canary):
    v1, v2, _ = canary
    sessions = [f"end-{i}" for i in range(8)]
    ttl = stack.cfg.adapters.resolve_ttl_s + 0.3
    stack.store.abort_canary(NAME)
    time.sleep(ttl)
    assert {version_of(served(stack, session=s)) for s in sessions} == {v1}
    stack.store.canary(NAME, v2, 100)
    time.sleep(ttl)
    assert {version_of(served(stack, session=s)) for s in sessions} == {v2}
    assert stack.store.promote(NAME).version == v2
    time.sleep(ttl)
    assert {version_of(served(stack, session=s)) for s in sessions} == {v2}
    assert "canary" not in stack.client.models.retrieve(f"{stack.base}:{NAME}").model_extra
