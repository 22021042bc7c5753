"""The single-node gateway's greedy outcomes per seed: the reference other layouts must reproduce.

Starts the embedded stack (one Ray node, the shipped ``models/maze-tiny`` and ``maze-grpo``) on
free ports in a private MAZE_HOME, runs ``maze-eval`` (64 mazes, greedy) for each model, and writes
``models/scores_gateway.json`` in the shape of ``models/scores_hf.json`` (one row per model with
``outcomes`` per seed), with the run's summary as ``maze-eval`` prints it (the solve rate's 95% Wilson
interval ``ci95``, ``errors``; README.md's ``make eval`` output is checked against it). The multi-node
tests compare a run that loses a node against it.

    python benchmarks/gateway_reference.py [--models maze-grpo]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "models" / "scores_gateway.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["maze-grpo"], help="maze-tiny and/or adapter names")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    os.environ["MAZE_HOME"] = tempfile.mkdtemp(prefix="maze-ref-")
    sys.path.insert(0, str(ROOT))  # run as a script: the repo's packages first
    from benchmarks.support.stack import stack_config
    from evaluation import EvalConfig, Store, evaluate
    from serving.local import embedded

    cfg = stack_config(ROOT / "models" / "maze-tiny", name="maze-gateway-reference")
    base_url = embedded.up(cfg, progress=print)
    rows = []
    try:
        for model in args.models:
            adapter = None if model == cfg.base_models[0].id else model
            db = str(Path(os.environ["MAZE_HOME"]) / "ref.sqlite")
            t0 = time.monotonic()
            result = evaluate(EvalConfig(endpoint=base_url, adapter=adapter, concurrency=args.concurrency, db=db))
            episodes = Store(db).episode_rows(result.run_id)
            s = result.summary
            rows.append({"model": model, "solve_rate": s.solve_rate, "solved": s.solved, "episodes": s.n,
                         "ci95": [s.ci_low, s.ci_high], "errors": s.errors, "history": result.manifest.history,
                         "protocol": result.manifest.protocol, "backend": "gateway-single-node-vllm-cpu",
                         "layout": f"{cfg.layout}+{cfg.ingress}", "seconds": round(time.monotonic() - t0, 1),
                         "outcomes": {str(r["seed"]): bool(r["success"]) for r in episodes}})
            print(f"{model}: {result.summary.solved}/{result.summary.n}")
    finally:
        embedded.down()
    OUT.write_text(json.dumps(rows, indent=2) + "\n")
    print(OUT)


if __name__ == "__main__":
    main()
