"""The live guard on the real embedded gateway (Ray Serve LLM on vLLM CPU, keys on): a canary that
does worse is rolled back by itself on the outcomes of real episodes.

A random LoRA (one of the stack's extra adapters) runs as a 50% canary of a name that serves the
shipped maze-grpo (58 of 64 mazes through the gateway, models/scores_gateway.json). Episodes are
played through the gateway by the agent's runner, which reports each outcome under the session the
split used; a server-side episode (``POST /v1/episodes``) reports through the same route. The guard
must roll the canary back within the episode budget: two passes over the 64 mazes, where the
simulation (benchmarks/results/guard_error_rate.json) puts the decision for a canary this much worse
well inside one.
"""

from __future__ import annotations

import asyncio

import pytest

from agent.runner import EndpointConfig, RunnerConfig, run_endpoint_async
from serving.parity import Gateway, check_served
from tests.support.gateway_stack import KEY  # the `stack` fixture lives in conftest.py

pytestmark = pytest.mark.slow
BUDGET = 128  # episodes: two passes over the fixed 64 mazes
BATCH = 16


def test_a_worse_canary_is_rolled_back_by_the_live_guard(stack):
    store, name = stack.store, "guarded"
    stable = stack.push(stack.assets.shipped["maze-grpo"], name).version
    spec = stack.cfg.base_models[0]
    worse = store.push(stack.assets.extra[6], name, base=spec.id, base_source=spec.source,
                       max_rank=stack.cfg.lora.max_rank, candidate=True).version
    _, record = check_served(stack.cfg, Gateway(stack.base_url, KEY), name, worse)
    assert record.ok is not False, record
    store.canary(name, worse, 50)
    model = f"{stack.base}:{name}"

    # A server-side episode counts as any other session.
    profile = next(m["agent_profile"] for m in stack.client.models.list().model_dump()["data"] if m["id"] == stack.base)
    played = stack.http.post("/v1/episodes", json={"model": model, "seed": 0, **profile}, timeout=300)
    assert played.status_code == 200, played.text
    ledger = stack.http.get(f"/v1/adapters/{name}/guard").json()["ledger"]
    assert ledger["evidence"]["canary_sessions"] + ledger["evidence"]["stable_sessions"] == 1
    assert ledger["evidence"]["canary_errors"] + ledger["evidence"]["stable_errors"] == 0

    endpoint = EndpointConfig(base_url=stack.base_url, api_key=KEY, model=model)
    episodes = 1
    while store.resolve(name).canary is not None and episodes < BUDGET:
        seeds = [(episodes + i) % 64 for i in range(BATCH)]
        asyncio.run(run_endpoint_async(endpoint, seeds, RunnerConfig(concurrency=8, **profile)))
        episodes += BATCH
    ref = store.resolve(name)
    entry = store.history(name)[0]
    print(f"\nlive guard: {entry.action} after {episodes} episodes: {entry.reason}")
    ledger = stack.http.get(f"/v1/adapters/{name}/guard").json()["ledger"]
    assert ref.canary is None and ref.version == stable, f"not rolled back within {BUDGET} episodes: {ledger}"
    assert entry.action == "abort" and entry.version == worse and entry.guard["against"] == stable
    assert entry.guard["losses"] > entry.guard["wins"] and entry.guard["e_worse"] >= 1 / 0.05
    shown = ledger
    assert shown["verdict"]["action"] == "rollback" and shown["verdict"]["outcome"] == "abort"
