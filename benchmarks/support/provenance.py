"""What made a results file: the commit, the command and the engine settings it ran with.

Every script's writer merges :func:`provenance` into its JSON (``benchmarks/results/NAME.json``), so a
figure in the docs can be traced to the code that measured it and re-measured the same way;
``tests/test_results_provenance.py`` checks that every results file says so.
"""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def provenance(argv: Sequence[str], engine_env: Mapping | None = None) -> dict:
    """``commit`` (short sha, ``-dirty`` when tracked files differ from it), ``command`` (the script
    relative to the repository and its arguments), ``engine_env`` (the engine settings the run used,
    :func:`engine_settings`; None where no engine ran), ``python``, ``cpus`` and ``measured_at``
    (UTC, ISO 8601)."""
    return {"commit": _commit(), "command": _command(argv),
            "engine_env": dict(engine_env) if engine_env is not None else None,
            "python": platform.python_version(), "cpus": os.cpu_count(),
            "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def engine_settings(cfg, env: Mapping[str, str] | None = None) -> dict:
    """The fields of a serving config that change how its engine runs, and the engine processes'
    environment (``env``: what the stack started them with, e.g. ``LD_PRELOAD``; default the
    config's own)."""
    base = cfg.base_models[0]
    return {"allocator": cfg.allocator, "cpu_affinity": cfg.cpu_affinity, "layout": cfg.layout,
            "ingress": cfg.ingress, "lora_cpu_kernels": cfg.cpu_lora_kernels,
            "lora_cpu_merged_slots": cfg.lora.cpu_merged_slots,
            "adapters_per_replica": cfg.lora.adapters_per_replica, "mm_cache_gb": base.mm_cache_gb,
            "engine_kwargs": dict(base.engine_kwargs), "env": dict(cfg.env if env is None else env)}


# A copy of the tree whose .git is not the commit it holds (the GPU machine gets the working tree with
# an older .git) names the commit it runs here.
COMMIT_ENV = "MAZE_RESULTS_COMMIT"


def _commit() -> str:
    if os.environ.get(COMMIT_ENV):
        return os.environ[COMMIT_ENV]

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()

    try:
        # Untracked files (a results file being written, scratch output) do not change what ran.
        dirty = git("status", "--porcelain", "--untracked-files=no")
        return git("rev-parse", "--short", "HEAD") + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _command(argv: Sequence[str]) -> str:
    script = Path(argv[0]).resolve() if argv else None
    if script is not None and script.is_relative_to(ROOT):
        first = str(script.relative_to(ROOT))
    else:
        first = argv[0] if argv else ""
    return shlex.join([first, *argv[1:]])
