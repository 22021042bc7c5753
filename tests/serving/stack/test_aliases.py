"""Adapter aliases on the real embedded gateway, with the official openai client: promote and
rollback change what serves ``base:NAME`` within the resolver's TTL, every response names the
version that served it, an explicit ``base:NAME@VERSION`` is served whatever the alias points at,
and an evaluation keeps the version it started with when the alias moves under it."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from evaluation import EvalConfig, Store, evaluate
from tests.support.gateway_stack import KEY, image_messages  # the `stack` fixture lives in conftest.py

pytestmark = pytest.mark.slow
NAME = "aliased"


def served(stack, model: str) -> tuple[str, list]:
    """(the model the response reports, the first token's top logprobs) for one greedy request."""
    resp = stack.client.chat.completions.create(model=model, messages=image_messages(), max_tokens=2, temperature=0,
                                                logprobs=True, top_logprobs=5)
    return resp.model, [(t.token, round(t.logprob, 4)) for t in resp.choices[0].logprobs.content[0].top_logprobs]


def wait_ttl(stack) -> None:
    time.sleep(stack.cfg.adapters.resolve_ttl_s + 0.3)  # the gateway's name -> version cache


@pytest.fixture(scope="module")
def versions(stack):
    v1 = stack.push(stack.assets.extra[6], NAME)
    v2 = stack.push(stack.assets.extra[7], NAME, force=True)
    assert v1.version != v2.version
    return v1.version, v2.version


def test_promote_and_rollback_change_what_serves_the_name(stack, versions):
    v1, v2 = versions
    alias = f"{stack.base}:{NAME}"
    model, out_v2 = served(stack, alias)
    assert model == f"{alias}@{v2}"
    assert stack.client.models.retrieve(alias).model_extra["version"] == v2

    stack.store.promote(NAME, v1)
    wait_ttl(stack)
    model, out_v1 = served(stack, alias)
    assert model == f"{alias}@{v1}" and out_v1 != out_v2, "the promoted version must serve the name"
    assert served(stack, f"{alias}@{v2}") == (f"{alias}@{v2}", out_v2)  # a non-current version on request

    assert stack.store.rollback(NAME).version == v2
    wait_ttl(stack)
    assert served(stack, alias) == (f"{alias}@{v2}", out_v2)
    assert [m.action for m in stack.store.history(NAME)[:2]] == ["rollback", "promote"]

    with pytest.raises(openai.NotFoundError, match="does not exist"):
        served(stack, f"{alias}@{'0' * 12}")
    with pytest.raises(openai.BadRequestError, match="invalid adapter version"):
        served(stack, f"{alias}@latest")


def test_running_eval_keeps_its_version_after_a_promote(stack, versions, tmp_path):
    v1, v2 = versions
    assert stack.store.resolve(NAME).version == v2
    moved: list[str] = []

    def on_episode(rec, done, total) -> None:
        if not moved:  # after the first episode: move the alias and let the gateway's cache expire
            moved.append(stack.store.promote(NAME, v1).version)
            wait_ttl(stack)

    db = str(tmp_path / "eval.sqlite")
    cfg = EvalConfig(endpoint=stack.base_url, api_key=KEY, adapter=NAME, seeds="0-2", max_turns=2, max_tokens=8,
                     concurrency=1, db=db)
    try:
        result = evaluate(cfg, on_episode=on_episode)
        assert moved == [v1] and served(stack, f"{stack.base}:{NAME}")[0].endswith(f"@{v1}")  # the alias did move
    finally:
        stack.store.rollback(NAME)
    assert result.manifest.adapter_version == v2 and result.summary.n == 3
    records = Store(db).episode_records(result.run_id)
    assert len(records) == 3 and {r.model for r in records} == {f"{stack.base}:{NAME}@{v2}"}
    assert all(r.stop_reason.value != "error" for r in records), [r.error for r in records]


def test_metrics_per_adapter_version(stack, versions):
    """After the traffic above (both versions served), /metrics counts requests, latency, tokens and
    loads per adapter version, and shows which replica holds which version."""
    from prometheus_client.parser import text_string_to_metric_families

    from serving.local import embedded

    v1, v2 = versions
    want = {"ray_maze_gateway_adapter_requests_total", "ray_maze_gateway_adapter_request_latency_seconds_count",
            "ray_maze_gateway_adapter_tokens_total", "ray_maze_gateway_adapter_load_latency_seconds_count"}
    url = embedded.status()["metrics_url"]

    def problems(seen: dict) -> list[str]:
        out = [f"{n} {v}" for n in sorted(want) for v in (v1, v2) if not any(k[:2] == (n, v) for k in seen)]
        out += [f"no replica holds {v}" for v in (v1, v2)
                if ("ray_serve_registered_multiplexed_model_id", f"{stack.base}:{NAME}@{v}", "") not in seen]
        out += [f"no completion tokens for {v}" for v in (v1, v2)
                if seen.get(("ray_maze_gateway_adapter_tokens_total", v, "completion"), 0) < 1]
        # the pinned eval's requests (3 episodes) all went to v2, on top of the handful above
        requests = {v: seen.get(("ray_maze_gateway_adapter_requests_total", v, "200"), 0) for v in (v1, v2)}
        if not requests[v2] >= requests[v1] + 3 >= 4:
            out.append(f"requests per version {requests}")
        return out

    deadline, seen = time.monotonic() + 90, {}
    while True:  # Ray's metrics agent exports every few seconds: counts catch up in steps
        seen = {}
        for family in text_string_to_metric_families(httpx.get(url, timeout=10).text):
            for s in family.samples:
                if s.name in want and s.labels.get("adapter") == NAME:
                    key = (s.name, s.labels["version"], s.labels.get("status") or s.labels.get("kind") or "")
                    seen[key] = seen.get(key, 0) + s.value
                elif s.name == "ray_serve_registered_multiplexed_model_id" and s.value == 1 and s.labels.get("replica"):
                    seen[(s.name, s.labels.get("model_id", ""), "")] = 1  # which replica holds which version
        if not problems(seen) or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert not problems(seen), (problems(seen), seen)
