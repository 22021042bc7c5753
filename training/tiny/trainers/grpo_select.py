"""Pick the best export of one or more GRPO runs (by greedy pass@1, later step on ties).

Usage: ``python -m training.tiny.trainers.grpo_select [--by-all-tasks] OUT RUN_DIR...``: picks on
the eval seeds, or with ``--by-all-tasks`` on all 768 tasks (runs made with ``eval_all_tasks``);
copies, per run, the best export's adapter, the run's metrics/summary and its latest checkpoint into
``OUT/<run name>/``, and writes ``OUT/picks.json``. ``python -m training.tiny.trainers.grpo_select
--pack OUT DEST`` packs each pick into ``DEST/pick_<run name>.tgz`` small enough to copy back from a remote GPU machine (files of at
most 16 MiB): a pick whose archive is larger goes without its checkpoint (optimizer state).
"""

from __future__ import annotations

import json
import shutil
import sys
import tarfile
from pathlib import Path

SEEDS_METRIC = "eval/all/pass_at_1"
TASKS_METRIC = "eval/all_tasks/pass_at_1"


def pick(run: Path, metric: str = SEEDS_METRIC) -> dict | None:
    """The run's best exported step by ``metric`` (later step on ties); None if no export was evaluated.

    ``TASKS_METRIC`` (runs with ``eval_all_tasks``) picks on all 768 tasks: a pick on the 64 eval
    seeds reads optimistic on those same seeds.
    """
    export = run / "export"
    rows = [json.loads(line) for line in (export / "metrics.jsonl").read_text().splitlines() if line.strip()]
    evals = [r for r in rows if metric in r
             and (export / f"global_step_{r['global_step']}" / "policy" / "adapter_model.safetensors").exists()]
    if not evals:
        return None
    best = max(evals, key=lambda r: (r[metric], r["global_step"]))
    out = {"run": run.name, "global_step": best["global_step"], "pass_at_1": best[SEEDS_METRIC], "picked_by": metric,
           "curve": [(r["global_step"], r[SEEDS_METRIC]) for r in rows if SEEDS_METRIC in r]}
    if TASKS_METRIC in best:
        out["all_tasks_pass_at_1"] = best[TASKS_METRIC]
    return out


def pack(picks_dir: Path, dest: Path, max_bytes: int = 15 * 2**20) -> dict[str, bool]:
    """One ``pick_<name>.tgz`` per pick folder in ``dest``; returns name -> whether the checkpoint
    fitted (the adapter, metrics and config always go)."""
    dest.mkdir(parents=True, exist_ok=True)
    fitted = {}
    for folder in sorted(p for p in picks_dir.iterdir() if p.is_dir()):
        archive = dest / f"pick_{folder.name}.tgz"
        for with_ckpt in (True, False):
            with tarfile.open(archive, "w:gz") as tar:
                tar.add(folder, arcname=folder.name,
                        filter=lambda t, keep=with_ckpt: t if keep or "/ckpt" not in t.name else None)
            if archive.stat().st_size <= max_bytes:
                break
        fitted[folder.name] = with_ckpt
    if (picks_dir / "picks.json").exists():
        (dest / "picks.json").write_text((picks_dir / "picks.json").read_text())
    return fitted


def main(out: str, runs: list[str], metric: str = SEEDS_METRIC) -> None:
    out_dir = Path(out)
    picks = []
    for r in map(Path, runs):
        p = pick(r, metric)
        if p is None:
            continue
        picks.append(p)
        dst = out_dir / r.name
        shutil.copytree(r / "export" / f"global_step_{p['global_step']}" / "policy", dst / "adapter")
        for name in ("metrics.jsonl", "summary.json", "grpo_config.json"):
            if (r / "export" / name).exists():
                shutil.copy2(r / "export" / name, dst / name)
        marker = r / "ckpt" / "latest_ckpt_global_step.txt"
        if marker.exists():
            step = marker.read_text().strip()
            shutil.copytree(r / "ckpt" / f"global_step_{step}", dst / "ckpt" / f"global_step_{step}")
            shutil.copy2(marker, dst / "ckpt" / marker.name)
    (out_dir / "picks.json").write_text(json.dumps(picks, indent=2) + "\n")
    print(json.dumps([{k: v for k, v in p.items() if k != "curve"} for p in picks]))


if __name__ == "__main__":
    if sys.argv[1] == "--pack":
        print(json.dumps(pack(Path(sys.argv[2]), Path(sys.argv[3]))))
    elif sys.argv[1] == "--by-all-tasks":
        main(sys.argv[2], sys.argv[3:], TASKS_METRIC)
    else:
        main(sys.argv[1], sys.argv[2:])
