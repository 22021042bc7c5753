"""The Inspect AI task and the verifiers environment against the scripted BFS server (seconds, no
model): each run from its framework's venv, as a user would, solving every maze it is given.

The real gateway, compared seed by seed with maze-eval, is tests/serving/stack/test_frameworks.py.
"""

from __future__ import annotations

import asyncio

from agent.protocol import DEFAULT_PROFILE
from maze_gateway.endpoint import gateway_profile, runner_config

from .venvs import inspect_eval, inspect_log, vf_episodes, vf_eval

SEEDS = "0-5"  # all solvable within the 15-turn limit by a shortest path


def test_inspect_task_solves_every_maze_and_logs_each_turn_with_its_frame(scripted_url, tmp_path):
    proc = inspect_eval("openai-api/scripted/bfs", f"seeds={SEEDS}", log_dir=tmp_path / "logs",
                        SCRIPTED_BASE_URL=scripted_url, SCRIPTED_API_KEY="unused")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    log = inspect_log(tmp_path / "logs")
    assert log["status"] == "success" and log["eval"]["task"] == "maze_gateway/maze"
    assert log["results"]["scores"][0]["metrics"]["accuracy"]["value"] == 1.0
    assert [s["id"] for s in log["samples"]] == list(range(6))
    for s in log["samples"]:
        meta = s["scores"]["solved"]["metadata"]
        assert s["scores"]["solved"]["value"] == "C" and meta["stop_reason"] == "goal"
        assert meta["turns"] == meta["optimal_moves"] + 1 and meta["served_model"] == "bfs"
        assert meta["history"] == "full"  # the scripted server reports no agent profile: VisGym's default
        assert len([e for e in s["events"] if e["event"] == "model"]) == meta["turns"]
        images = [p["image"] for m in s["messages"] if m["role"] == "user"
                  for p in m["content"] if p["type"] == "image"]
        assert len(images) == meta["turns"] + 1
        assert all(s["attachments"][i.removeprefix("attachment://")].startswith("data:image/png;base64,")
                   for i in images)
    metrics = log["results"]["scores"][0]["metrics"]
    # The scripted server reports 6 completion tokens per reply.
    solved_turns = [s["scores"]["solved"]["metadata"]["turns"] for s in log["samples"]]
    assert metrics["completion_tokens_per_solve"]["value"] == 6 * sum(solved_turns) / len(solved_turns)


def test_inspect_task_rejects_bad_parameters(scripted_url, tmp_path):
    proc = inspect_eval("openai-api/scripted/bfs", "variant=maze_2d/giant", log_dir=tmp_path / "logs",
                        SCRIPTED_BASE_URL=scripted_url, SCRIPTED_API_KEY="unused")
    assert proc.returncode != 0 and "unknown env id 'maze_2d/giant'" in proc.stdout + proc.stderr


def test_vf_eval_solves_every_maze_with_frames_in_the_trace(scripted_url, tmp_path):
    proc = vf_eval("bfs", scripted_url, "--client.api-key-var", "SCRIPTED_API_KEY", "--env.taskset.seeds", SEEDS,
                   out=tmp_path / "out", SCRIPTED_API_KEY="unused")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    episodes = vf_episodes(tmp_path / "out")
    assert sorted(e["task"]["data"]["seed"] for e in episodes) == list(range(6))
    for episode in episodes:
        (trace,) = episode["traces"]
        info = trace["info"]["maze"]
        assert episode["ok"] and trace["rewards"]["solved"]["score"] == 1.0 and info["stop_reason"] == "goal"
        assert len(trace["calls"]) == info["turns"] == info["optimal_moves"] + 1
        # Full history: every call carries the conversation so far, frames as image_url parts.
        prompts = [c["usage"]["prompt_tokens"] for c in trace["calls"]]
        assert prompts == [64 * (2 * i + 1) for i in range(info["turns"])]
        users = [n["message"] for n in trace["nodes"] if n["message"]["role"] == "user"]
        assert len(users) == info["turns"]
        assert all(m["content"][1]["image_url"]["url"].startswith("data:image/png;base64,") for m in users)


def test_vf_eval_rejects_bad_seeds(scripted_url, tmp_path):
    proc = vf_eval("bfs", scripted_url, "--env.taskset.seeds", "9-1", out=tmp_path / "out")
    assert proc.returncode != 0 and "seeds must look like '0-63' or '1,5,9', got '9-1'" in proc.stdout + proc.stderr


def test_the_profile_comes_from_the_endpoint_and_options_override_it(scripted_url):
    assert asyncio.run(gateway_profile(scripted_url, None, "bfs:noisy")) == DEFAULT_PROFILE
    assert asyncio.run(gateway_profile("http://127.0.0.1:9/v1", None, "x")) == DEFAULT_PROFILE  # unreachable
    cfg = runner_config("maze_2d/hard", DEFAULT_PROFILE, history="window:2")
    assert (cfg.protocol, str(cfg.history), cfg.turn_limit) == ("tuple", "window:2", 30)

