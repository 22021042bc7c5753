"""Inspect AI and verifiers against maze-eval on the embedded gateway, seed by seed (64 mazes).

Starts the embedded stack (free ports, its own ``MAZE_HOME``, the shipped ``models/maze-tiny`` and
``maze-grpo``, auth on), then for ``maze-tiny`` and ``maze-tiny:maze-grpo`` plays seeds 0..63 of
maze_2d/simple greedily three ways: ``maze-eval`` (concurrency 8), ``inspect eval maze_gateway/maze``
and ``vf-eval maze-gateway -c 8``, each framework from its own venv as a user runs it
(tests/maze_gateway/venvs.py). Records per model and tool: solved, per-seed agreement with
maze-eval, the model version served, and wall time. Writes ``benchmarks/results/frameworks.json``.

tests/serving/stack/test_frameworks.py checks the same on 8 seeds in every test run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.support.provenance import engine_settings, provenance
from benchmarks.support.stack import dev_assets, stack_config
from evaluation import EvalConfig, Store, evaluate
from tests.maze_gateway.venvs import inspect_eval, inspect_log, inspect_outcomes, vf_episodes, vf_eval, vf_outcomes

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "frameworks.json"
KEY, KEY_ENV = "sk-bench-frameworks-01", "MAZE_BENCH_FRAMEWORK_KEYS"
MODELS = {"maze-tiny": None, "maze-tiny:maze-grpo": "maze-grpo"}  # model id -> maze-eval's --adapter


def _checked(proc, what: str) -> None:
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")


def _row(outcomes: dict[int, bool], ref: dict[int, bool], served: set[str], wall_s: float) -> dict:
    return {"episodes": len(outcomes), "solved": sum(outcomes.values()),
            "agreement_with_maze_eval": sum(ref[s] == outcomes.get(s) for s in ref),
            "differ_seeds": sorted(s for s in ref if ref[s] != outcomes.get(s)),
            "served_models": sorted(served), "wall_s": round(wall_s, 1)}


def compare(url: str, model: str, adapter: str | None, seeds: str, work: Path) -> dict:
    """maze-eval, Inspect and verifiers on one model; their outcomes compared per seed with maze-eval's."""
    db = str(work / "maze-eval.sqlite")
    t0 = time.monotonic()
    result = evaluate(EvalConfig(endpoint=url, api_key=KEY, adapter=adapter, seeds=seeds, concurrency=8, db=db))
    ref = {r["seed"]: bool(r["success"]) for r in Store(db).episode_rows(result.run_id)}
    rows = {"maze_eval": _row(ref, ref, {result.manifest.served_model}, time.monotonic() - t0)}

    t0 = time.monotonic()
    logs = work / f"inspect-{adapter or 'base'}" / "logs"
    logs.parent.mkdir(parents=True)
    _checked(inspect_eval(f"openai-api/maze/{model}", f"seeds={seeds}", log_dir=logs, timeout=3600,
                          MAZE_BASE_URL=url, MAZE_API_KEY=KEY), "inspect eval")
    log = inspect_log(logs)
    served = {s["scores"]["solved"]["metadata"]["served_model"] for s in log["samples"]}
    rows["inspect_eval"] = _row(inspect_outcomes(log), ref, served, time.monotonic() - t0)

    t0 = time.monotonic()
    out = work / f"vf-{adapter or 'base'}" / "out"
    out.parent.mkdir(parents=True)
    _checked(vf_eval(model, url, "--client.api-key-var", "MAZE_API_KEY", "--env.taskset.seeds", seeds, "-c", "8",
                     out=out, timeout=3600, MAZE_API_KEY=KEY), "vf-eval")
    episodes = vf_episodes(out)
    served = {e["traces"][0]["info"]["maze"]["served_model"] for e in episodes}
    rows["vf_eval"] = _row(vf_outcomes(episodes), ref, served, time.monotonic() - t0)
    for tool, row in rows.items():
        print(f"{model:22s} {tool:12s} solved {row['solved']}/{row['episodes']}, agreement "
              f"{row['agreement_with_maze_eval']}/{len(ref)}, {row['wall_s']}s", flush=True)
    return rows


def run(seeds: str) -> dict:
    from serving.local import embedded

    assets = dev_assets(n_extra=0)
    if not str(assets.base_dir).endswith("models/maze-tiny"):
        raise SystemExit("the shipped models/maze-tiny and models/maze-grpo are needed (git lfs pull)")
    os.environ["MAZE_HOME"] = home = tempfile.mkdtemp(prefix="frameworks-")
    os.environ[KEY_ENV] = KEY
    cfg = stack_config(assets.base_dir, name="frameworks-bench", auth_env=KEY_ENV)
    t0 = time.monotonic()
    url = embedded.up(cfg, adapters=assets.shipped)
    out: dict = {"time_to_ready_s": round(time.monotonic() - t0, 1), "models": {}, "engine": engine_settings(cfg)}
    try:
        for model, adapter in MODELS.items():
            work = Path(home) / (adapter or "base")
            work.mkdir()
            out["models"][model] = compare(url, model, adapter, seeds, work)
    finally:
        embedded.down()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--seeds", default="0-63", help="the seeds every tool plays (maze-eval's form: 0-63 or 1,5,9)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    t0 = time.monotonic()
    result = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
              "workload": {"variant": "maze_2d/simple", "seeds": args.seeds, "temperature": 0, "concurrency": 8,
                           "tools": ["maze-eval", "inspect eval maze_gateway/maze", "vf-eval maze-gateway"]},
              **run(args.seeds)}
    result["bench_wall_s"] = round(time.monotonic() - t0, 1)
    result.update(provenance([__file__, *sys.argv[1:]], result.pop("engine")))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
