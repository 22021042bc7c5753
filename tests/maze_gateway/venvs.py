"""The frameworks' venvs and processes run in them (shared by tests/maze_gateway and the gateway tests).

openenv-core, verifiers and inspect-ai each pin versions that the serving stack's venv cannot take
(pillow, openai, botocore), and verifiers' openai<3 excludes inspect-ai's openai>=3.4, so
scripts/setup.sh installs each extra, with this package, into a venv of its own: ``.venv-openenv``,
``.venv-verifiers``, ``.venv-inspect`` (or ``$MAZE_VENV_OPENENV`` and so on).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def venv_bin(framework: str, program: str = "python") -> Path:
    """A program of the framework's venv; the test fails (naming the fix) when the venv is missing."""
    venv = Path(os.environ.get(f"MAZE_VENV_{framework.upper()}", ROOT / f".venv-{framework}"))
    path = venv / "bin" / program
    if not path.exists():
        pytest.fail(f"{path} is missing: scripts/setup.sh installs the {framework} venv (.[{framework}])")
    return path


def venv_env(**extra: str) -> dict[str, str]:
    """The environment of a process in a framework venv (its editable install is this checkout).

    Bytecode writing stays on even where the caller's environment turns it off: the framework venvs
    are installed without compiled bytecode (scripts/install_frameworks.sh), so the first process
    compiles what it imports, once, and the later ones load it."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def run_in_venv(cmd: list[str], cwd: Path, timeout: float, **extra_env: str) -> subprocess.CompletedProcess:
    """Run a framework's command as a user would (its venv's environment), capturing its output."""
    return subprocess.run(cmd, env=venv_env(**extra_env), cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          check=False)


def inspect_eval(model: str, *task_args: str, log_dir: Path, timeout: float = 300,
                 **extra_env: str) -> subprocess.CompletedProcess:
    """``inspect eval maze_gateway/maze --model MODEL -T ARG...`` with a JSON log in ``log_dir``."""
    cmd = [str(venv_bin("inspect", "inspect")), "eval", "maze_gateway/maze", "--model", model,
           *(x for arg in task_args for x in ("-T", arg)),
           "--log-dir", str(log_dir), "--log-format", "json", "--display", "plain"]
    return run_in_venv(cmd, log_dir.parent, timeout, **extra_env)


def vf_eval(model: str, base_url: str, *options: str, out: Path, timeout: float = 300,
            **extra_env: str) -> subprocess.CompletedProcess:
    """``vf-eval maze-gateway -m MODEL --client.base-url URL OPTION...`` writing its traces under ``out``."""
    cmd = [str(venv_bin("verifiers", "vf-eval")), "maze-gateway", "-m", model, "--client.base-url", base_url,
           *options, "--no-push", "-o", str(out)]
    return run_in_venv(cmd, out.parent, timeout, **extra_env)


def inspect_log(log_dir: Path) -> dict:
    """The one JSON log an ``inspect eval`` run wrote to ``log_dir``."""
    (log_file,) = log_dir.glob("*.json")
    return json.loads(log_file.read_text())


def vf_episodes(out: Path) -> list[dict]:
    """The episodes of the one ``vf-eval`` run written under ``out`` (its traces.jsonl)."""
    (traces_file,) = out.glob("*/traces.jsonl")
    return [json.loads(line) for line in traces_file.read_text().splitlines()]


def inspect_outcomes(log: dict) -> dict[int, bool]:
    """Solved or not, per seed, from an Inspect log."""
    return {s["id"]: s["scores"]["solved"]["value"] == "C" for s in log["samples"]}


def vf_outcomes(episodes: list[dict]) -> dict[int, bool]:
    """Solved or not, per seed, from vf-eval's episodes."""
    return {e["traces"][0]["info"]["maze"]["seed"]: e["traces"][0]["rewards"]["solved"]["score"] == 1.0
            for e in episodes}
