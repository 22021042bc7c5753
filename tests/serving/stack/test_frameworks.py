"""Inspect AI and verifiers on the real embedded gateway: their episodes are maze-eval's.

``inspect eval maze_gateway/maze`` (the openai-api provider, MAZE_BASE_URL / MAZE_API_KEY) and
``vf-eval maze-gateway``, each from its own venv (tests/maze_gateway/venvs.py), play eight seeds of
maze_2d/simple greedily against the shipped adapter, maze-tiny:maze-grpo (seeds 13-20: it fails two of
them, so a framework that scored every episode alike would disagree); per seed they agree with
maze-eval's run on the same gateway on at least 7 of 8. Their logs carry every turn with its frame and
the adapter version the gateway served. The base model is the same path without an adapter; the full
64-seed comparison of both models is benchmarks/frameworks.py.
"""

from __future__ import annotations

import pytest

from evaluation import EvalConfig, Store, evaluate
from tests.maze_gateway.venvs import inspect_eval, inspect_log, inspect_outcomes, vf_episodes, vf_eval, vf_outcomes

from tests.support.gateway_stack import KEY

SEEDS, N = "13-20", 8
MODELS = {"maze-tiny:maze-grpo": "maze-grpo"}  # model id -> maze-eval's --adapter
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shipped(stack):
    if not str(stack.assets.base_dir).endswith("models/maze-tiny"):
        pytest.fail("the shipped models/maze-tiny must be served for this test")
    return stack


@pytest.fixture(scope="module")
def maze_eval(shipped, tmp_path_factory) -> dict[str, dict]:
    """maze-eval on the same gateway, per model: outcome per seed and the version it pinned."""
    db = str(tmp_path_factory.mktemp("frameworks") / "maze-eval.sqlite")
    out = {}
    for model, adapter in MODELS.items():
        result = evaluate(EvalConfig(endpoint=shipped.base_url, api_key=KEY, adapter=adapter, seeds=SEEDS,
                                     concurrency=8, db=db))
        assert result.status == "complete"
        rows = Store(db).episode_rows(result.run_id)
        out[model] = {"outcomes": {r["seed"]: bool(r["success"]) for r in rows},
                      "served": result.manifest.served_model, "solved": result.summary.solved}
        print(f"\nmaze-eval {model}: {result.summary.solved}/{N} ({result.manifest.served_model})")
    return out


def agreement(a: dict[int, bool], b: dict[int, bool]) -> int:
    return sum(a[s] == b.get(s) for s in a)


@pytest.mark.parametrize("model", list(MODELS))
def test_inspect_eval_plays_the_runners_episodes(shipped, maze_eval, tmp_path, model):
    proc = inspect_eval(f"openai-api/maze/{model}", f"seeds={SEEDS}", log_dir=tmp_path / "logs", timeout=600,
                        MAZE_BASE_URL=shipped.base_url, MAZE_API_KEY=KEY)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    log = inspect_log(tmp_path / "logs")
    assert log["status"] == "success" and log["eval"]["task"] == "maze_gateway/maze"
    outcomes = inspect_outcomes(log)
    ref = maze_eval[model]
    agree = agreement(ref["outcomes"], outcomes)
    print(f"\ninspect eval {model}: {sum(outcomes.values())}/{N} solved, maze-eval {ref['solved']}/{N}, "
          f"agreement {agree}/{N}")
    assert len(ref["outcomes"]) == len(outcomes) == N and agree >= N - 1
    for s in log["samples"]:
        meta = s["scores"]["solved"]["metadata"]
        assert meta["served_model"] == ref["served"]  # base:adapter@version, the version maze-eval pinned
        assert meta["history"] == "window:2" and meta["protocol"] == "tuple/v1" and meta["max_turns"] == 15
        # Every turn is a model call in the log, and the conversation holds a frame after each turn.
        calls = [e for e in s["events"] if e["event"] == "model"]
        assert len(calls) == meta["turns"]
        assert all(c["output"]["model"] == ref["served"] for c in calls)
        frames = [p for m in s["messages"] if m["role"] == "user" for p in m["content"] if p["type"] == "image"]
        assert len(frames) == meta["turns"] + 1
    frame_url = log["samples"][0]["attachments"]
    assert any(v.startswith("data:image/png;base64,") for v in frame_url.values())


@pytest.mark.parametrize("model", list(MODELS))
def test_vf_eval_plays_the_runners_episodes(shipped, maze_eval, tmp_path, model):
    proc = vf_eval(model, shipped.base_url, "--client.api-key-var", "MAZE_API_KEY", "--env.taskset.seeds", SEEDS,
                   "-c", "8", out=tmp_path / "out", timeout=600, MAZE_API_KEY=KEY)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    episodes = vf_episodes(tmp_path / "out")
    assert len(episodes) == N and all(e["ok"] for e in episodes)
    for episode in episodes:
        (trace,) = episode["traces"]
        info = trace["info"]["maze"]
        assert info["served_model"] == maze_eval[model]["served"] and info["history"] == "window:2"
        # Each turn is one recorded model call; the messages it sent carry the frames as image parts
        # (the trace stores each distinct message once: a repeated wall bump is one node).
        assert len(trace["calls"]) == info["turns"]
        users = [n["message"] for n in trace["nodes"] if n["message"]["role"] == "user"]
        assert users and all(any(p["type"] == "image_url" and p["image_url"]["url"].startswith("data:image/png;base64,")
                                 for p in m["content"]) for m in users)
    outcomes = vf_outcomes(episodes)
    ref = maze_eval[model]
    agree = agreement(ref["outcomes"], outcomes)
    print(f"\nvf-eval {model}: {sum(outcomes.values())}/{N} solved, maze-eval {ref['solved']}/{N}, "
          f"agreement {agree}/{N}")
    assert agree >= N - 1
