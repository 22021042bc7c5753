"""Running a command-line tool as a real subprocess and checking its failure contract: one line
on stderr starting with ``error:``, the documented exit code, never a traceback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_cli(module: str, *args: str, env: dict[str, str | None] | None = None, verbose: bool = False,
            timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m module [--verbose] args...`` with this checkout first on the path; ``env`` is laid
    over this process's environment (a ``None`` value removes the variable)."""
    merged = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    full_env = {k: v for k, v in merged.items() if v is not None}
    cmd = [sys.executable, "-m", module, *(["--verbose"] if verbose else []), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=timeout, check=False)


def assert_one_line(done: subprocess.CompletedProcess, code: int, *fragments: str) -> None:
    """Exit ``code`` and exactly one ``error:`` line naming every fragment; progress lines
    (``... starting local S3``) printed before the failure are not errors."""
    lines = [line for line in done.stderr.strip().splitlines() if not line.startswith("... ")]
    assert done.returncode == code, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr and len(lines) == 1 and lines[0].startswith("error: "), done.stderr[-2000:]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def assert_json_error(done: subprocess.CompletedProcess, code: int, *fragments: str) -> None:
    """With ``--json``: exit ``code`` and the failure as one JSON object on stdout, no traceback."""
    assert done.returncode == code, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    error = json.loads(done.stdout)
    assert error["exit_code"] == code, error
    for fragment in fragments:
        assert fragment in error["error"], error


def closed_port() -> int:
    """A loopback port that refuses connections for the rest of the test run: bound, never listened
    on, and held, so no server another test starts meanwhile (a Ray head's dashboard) can take it.
    A port bound once and released could be handed to such a server before the test connects."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    _HELD.append(s)
    return s.getsockname()[1]


_HELD: list[socket.socket] = []  # closed_port()'s sockets, kept open until the process ends
