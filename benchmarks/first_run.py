"""The main job from a stopped stack: how long `maze-serve up` takes, then the first and the second
`maze-eval --adapter maze-grpo` on it (is anything paid once inside the first evaluation?).

    PYTHONPATH=. .venv/bin/python benchmarks/first_run.py [--fresh-clone]

Each step runs as a user runs it: the installed CLIs as subprocesses, timed by wall clock, on a
fresh state directory (``MAZE_HOME``) and results database. ``--fresh-clone`` adds the newcomer's
path: ``git clone`` of this checkout (its committed files) into a temporary folder and ``make eval``
there, end to end (set-up of a new venv, the stack's start, the evaluation). Results:
benchmarks/results/first_run.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> tuple[float, str]:
    """Run ``cmd`` to completion (output to ``log``, stdout also returned); (seconds, stdout)."""
    t0 = time.monotonic()
    with open(log, "ab") as err:
        proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=err, check=False)
    seconds = round(time.monotonic() - t0, 1)
    if proc.returncode not in (0,):
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}; see {log}")
    return seconds, proc.stdout.decode()


def eval_once(venv_bin: Path, cwd: Path, env: dict[str, str], log: Path, seeds: str = "0-63") -> dict:
    seconds, out = timed([str(venv_bin / "maze-eval"), "--adapter", "maze-grpo", "--seeds", seeds, "--json"],
                         cwd, env, log)
    result = json.loads(out)
    summary = result["summary"]
    return {"seconds": seconds, "solved": summary["solved"], "episodes": summary["n"] + summary["errors"]}


def cold_state(kind: str, tmp: Path) -> tuple[dict[str, str], dict]:
    """A fresh machine's state for ``kind`` (``pages``, ``compile``, ``all`` or ``none``): the page cache
    of what the stack reads dropped, empty compile caches (environment variables), or both; the
    variables and what was done."""
    from benchmarks.support.cold_cache import empty_caches, evict, resident_bytes, stack_trees

    env: dict[str, str] = {}
    done: dict = {"kind": kind}
    if kind in ("compile", "all"):
        env = empty_caches(tmp / "caches")
        done["empty_caches"] = sorted(env)
    if kind in ("pages", "all"):
        import importlib.util

        # torch's libraries are the largest the engine maps; found, not imported (a mapped page stays cached).
        libs = sorted((Path(importlib.util.find_spec("torch").origin).parent / "lib").glob("*.so*"))
        before = resident_bytes(libs)
        done["evicted"] = evict(stack_trees(ROOT))
        done["torch_libs_resident_bytes"] = {"before": before, "after": resident_bytes(libs)}
    return env, done


def warm_and_cold(venv_bin: Path, cwd: Path, home: Path, log: Path, extra_env: dict[str, str] | None = None) -> dict:
    """up (timed); the evaluation (seeds 0-63) first, then again; then seeds 64-127, down: on
    ``home`` as MAZE_HOME.

    The repeat sends the very requests the first run sent, so the engine's prefix cache and
    processed-image cache answer much of it; seeds 64-127 are a warm engine on requests it has not
    seen, the fair measure of what the first run paid once."""
    env = {**os.environ, "MAZE_HOME": str(home), "MAZE_DB": str(home / "results.db"), **(extra_env or {})}
    out: dict = {}
    try:
        out["up_s"], _ = timed([str(venv_bin / "maze-serve"), "up"], cwd, env, log)
        out["first_eval"] = eval_once(venv_bin, cwd, env, log)
        out["repeat_eval"] = eval_once(venv_bin, cwd, env, log)
        out["other_seeds_eval"] = eval_once(venv_bin, cwd, env, log, seeds="64-127")
    finally:
        subprocess.run([str(venv_bin / "maze-serve"), "down"], cwd=cwd, env=env, capture_output=True, check=False)
    first = out["first_eval"]["seconds"]
    out["first_over_repeat"] = round(first / out["repeat_eval"]["seconds"], 3)
    out["first_over_other_seeds"] = round(first / out["other_seeds_eval"]["seconds"], 3)
    return out


def fresh_clone(home: Path, log: Path) -> dict:
    """``git clone`` + ``make eval`` in the clone, end to end, as a new user on this machine: an empty
    home directory (no caches of earlier runs) apart from pip's download cache; the clone's stack
    stopped after."""
    clone = Path(tempfile.mkdtemp(prefix="maze-fresh-")) / "maze-gateway"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    home.mkdir(parents=True)
    env = {**os.environ, "HOME": str(home), "PIP_CACHE_DIR": str(Path.home() / ".cache" / "pip")}
    try:
        seconds, _ = timed(["make", "eval"], clone, env, log)
    finally:
        subprocess.run([str(clone / ".venv" / "bin" / "maze-serve"), "down"], cwd=clone, env=env,
                       capture_output=True, check=False)
        shutil.rmtree(clone.parent, ignore_errors=True)
    return {"make_eval_s": seconds}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "first_run.json")
    ap.add_argument("--fresh-clone", action="store_true", help="also time `make eval` in a fresh clone")
    ap.add_argument("--cold", choices=("none", "pages", "compile", "all"), default="none",
                    help="start from a fresh machine's caches: the page cache of the venv, the standard library "
                         "and the repository dropped (pages), empty compile caches (compile), or both (all)")
    args = ap.parse_args()
    log = Path(tempfile.gettempdir()) / "maze-first-run.log"
    log.write_text("")
    results: dict = {"cpu_count": os.cpu_count(), "log": "stderr of every step: " + str(log)}
    with tempfile.TemporaryDirectory(prefix="maze-first-run-") as tmp:
        if args.fresh_clone:
            results["fresh_clone"] = fresh_clone(Path(tmp) / "clone-home", log)
            print(json.dumps(results["fresh_clone"]), file=sys.stderr)
        sys.path.insert(0, str(ROOT))
        extra, results["cold"] = cold_state(args.cold, Path(tmp))
        results["checkout"] = warm_and_cold(Path(sys.executable).parent, ROOT, Path(tmp) / "home", log, extra)
    results.pop("log")
    sys.path.insert(0, str(ROOT))
    from benchmarks.support.provenance import engine_settings, provenance
    from serving.config import ServingConfig

    # `maze-serve up` and `make eval` start the shipped embedded config.
    results.update(provenance([__file__, *sys.argv[1:]], engine_settings(ServingConfig.shipped("embedded"))))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
