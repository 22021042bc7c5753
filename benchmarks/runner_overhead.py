"""Runner overhead per turn: in-process with a zero-latency policy, and through HTTP.

Writes ``benchmarks/results/runner_overhead.json``. The in-process figure is the runner's own
cost per turn (env step, render, PNG encode, base64, message build, history, parse): the time
between one policy call returning and the next one starting. Target: p50 <= 1 ms on
maze_2d/simple. The HTTP figure adds the official client and the scripted server.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import platform
import sys
import time
import timeit
from pathlib import Path

import numpy as np

from agent import EndpointConfig, EpisodeSpec, PolicyReply, RunnerConfig, run_endpoint_async, run_episode_async
from agent.cli.demo import scripted_server
from agent.env import MazeEnv
from agent.maze import encode_png, generate_from_seed, render_frame, shortest_path
from agent.protocol import TUPLE, HistoryPolicy, user_message

log = logging.getLogger("bench.runner")
OUT = Path(__file__).parent / "results" / "runner_overhead.json"


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def components(n: int = 2000) -> dict[str, float]:
    """Microseconds per call of each per-turn step, measured alone."""
    m = generate_from_seed(7, 7, 0)
    env = MazeEnv(7)
    env.reset(seed=0)
    frame = render_frame(m.grid, m.start, m.goal)
    png = encode_png(frame)
    conv = [user_message("x", frame)] * 31
    us = lambda f: timeit.timeit(f, number=n) / n * 1e6
    return {
        "env_step_invalid_us": us(lambda: env.step("('move', 9)")),
        "render_us": us(lambda: render_frame(m.grid, m.start, m.goal)),
        "png_encode_us": us(lambda: encode_png(frame)),
        "base64_us": us(lambda: base64.b64encode(png).decode()),
        "message_build_us": us(lambda: user_message("Action executed successfully.", frame)),
        "history_select_full_us": us(lambda: HistoryPolicy().select(conv)),
        "parse_us": us(lambda: TUPLE.parse("('move', 0)")),
    }


class ZeroLatencyPolicy:
    """Replies with the optimal next move instantly (plan precomputed) and records the gaps
    between one reply and the next request: the runner's own cost per turn."""

    def __init__(self, seed: int, gaps: list[float]):
        m = generate_from_seed(7, 7, seed)
        self.moves = [f"('move', {d})" for d in shortest_path(m.grid, m.start, m.goal)] + ["('stop', 'stop')"]
        self.gaps, self.last, self.label = gaps, None, "zero-latency"

    async def __call__(self, messages, sampling) -> PolicyReply:
        if self.last is not None:
            self.gaps.append(time.perf_counter() - self.last)
        reply = PolicyReply(self.moves.pop(0) if self.moves else "('stop', 'stop')")
        self.last = time.perf_counter()
        return reply


async def in_process(episodes: int) -> dict[str, float]:
    gaps: list[float] = []
    cfg = RunnerConfig()
    turns = solved = 0
    t0 = time.perf_counter()
    for i in range(episodes):
        rec = await run_episode_async(ZeroLatencyPolicy(i % 64, gaps), EpisodeSpec(seed=i % 64), cfg)
        turns, solved = turns + rec.num_turns, solved + rec.success
    wall = time.perf_counter() - t0
    return {
        "episodes": episodes,
        "turns": turns,
        "solved": solved,
        "per_turn_p50_ms": pct(gaps, 50) * 1e3,
        "per_turn_p95_ms": pct(gaps, 95) * 1e3,
        "per_turn_mean_ms_incl_reset": wall / turns * 1e3,
    }


async def over_http(url: str, episodes: int, concurrency: int) -> dict[str, float]:
    ep = EndpointConfig(base_url=url, model="bfs")
    t0 = time.perf_counter()
    recs = await run_endpoint_async(ep, range(episodes), RunnerConfig(concurrency=concurrency))
    wall = time.perf_counter() - t0
    lat = [t.latency_s for r in recs for t in r.turns]
    return {
        "concurrency": concurrency,
        "episodes": episodes,
        "turns": len(lat),
        "solved": sum(r.success for r in recs),
        "request_p50_ms": pct(lat, 50) * 1e3,
        "request_p95_ms": pct(lat, 95) * 1e3,
        "wall_s": wall,
        "turns_per_s": len(lat) / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for noisy in ("httpx", "httpx2"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    result = {
        "machine": {"python": platform.python_version(), "cpu_count": __import__("os").cpu_count()},
        "components_us": components(),
        "in_process": asyncio.run(in_process(args.episodes)),
    }
    with scripted_server() as url:
        result["http"] = [asyncio.run(over_http(url, 64, c)) for c in (1, 8)]
    ip = result["in_process"]
    result["target"] = {"per_turn_p50_ms_max": 1.0, "met": ip["per_turn_p50_ms"] <= 1.0}
    result["http_vs_in_process_p50_ratio"] = result["http"][0]["request_p50_ms"] / ip["per_turn_p50_ms"]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: benchmarks/ is not installed
    from benchmarks.support.provenance import provenance

    result.update(provenance([__file__, *sys.argv[1:]]))  # the runner against a scripted server: no engine
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    log.info(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
