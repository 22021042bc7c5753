"""The offline gate on the real embedded gateway (Ray Serve LLM on vLLM CPU, keys on): ``maze-eval gate``
plays the candidate and the version a name serves through the gateway, each pinned by version, and
records its decision through the gateway's management routes.

A random LoRA (one of the stack's extra adapters) against the shipped maze-grpo (58 of 64 mazes
through the gateway, models/scores_gateway.json) is told apart within a look or two: served, the
random one is left as worse; pushed as a candidate against it, maze-grpo is promoted. Each
candidate's parity is measured first, as `maze-serve adapters verify --parity` would, since the gate
promotes only a version with a passed parity record.
"""

from __future__ import annotations

import pytest

from evaluation import EvalConfig, Store, compare
from evaluation.gate import gate
from serving.parity import Gateway, check_served
from tests.support.gateway_stack import KEY  # the `stack` fixture lives in conftest.py

pytestmark = pytest.mark.slow


def measured(stack, name: str, version: str) -> None:
    _, record = check_served(stack.cfg, Gateway(stack.base_url, KEY), name, version)
    assert record.ok is not False, record


def play(stack, target: str, db: str):
    return gate(EvalConfig(endpoint=stack.base_url, api_key=KEY, db=db, concurrency=8), target)


def test_a_random_candidate_is_left_and_maze_grpo_is_promoted(stack, tmp_path):
    store, db = stack.store, str(tmp_path / "gate.sqlite")
    served = stack.push(stack.assets.shipped["maze-grpo"], "gated").version
    spec = stack.cfg.base_models[0]
    random_lora = store.push(stack.assets.extra[6], "gated", base=spec.id, base_source=spec.source,
                             max_rank=stack.cfg.lora.max_rank, candidate=True).version
    measured(stack, "gated", random_lora)

    worse = play(stack, f"gated@{random_lora}", db)
    print(f"\nrandom LoRA against maze-grpo: {worse.verdict} after {worse.seeds} seeds, "
          f"{worse.wins} wins {worse.losses} losses")
    assert worse.verdict == "worse" and not worse.promoted and worse.seeds < 64
    assert store.resolve("gated").version == served
    entry = store.history("gated")[0]
    assert (entry.action, entry.version, entry.gate["verdict"]) == ("gate", random_lora, "worse")
    assert [g["verdict"] for g in compare(Store(db), worse.run_against, worse.run).gates] == ["worse"]

    # The other way round: the random LoRA serves, maze-grpo is the candidate.
    store.promote("gated", random_lora)
    measured(stack, "gated", served)
    better = play(stack, f"gated@{served}", db)
    assert better.verdict == "better" and better.promoted and better.seeds < 64
    assert store.resolve("gated").version == served
    assert store.history("gated")[0].gate["run"] == better.run
