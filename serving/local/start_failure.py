"""Why a gateway start failed, in words a user can act on.

When a replica's constructor fails (an engine that cannot start, a config vLLM refuses), Ray Serve
retries it and then reports only that the application failed to deploy. The exception that says why
is in the replica's and the engine's own output, in Ray's session logs, which ``up`` keeps
(:func:`serving.local.embedded.keep_ray_logs`). :func:`root_cause` reads it from there.
"""

from __future__ import annotations

import re
from pathlib import Path

# What Ray and vLLM put before a line a subprocess printed: "(Worker pid=2823) ERROR 12-07 19:13:08
# [multiproc_executor.py:1007] " or "(EngineCore pid=4174) ".
_PREFIX = re.compile(r"^\([\w ]+ pid=\d+\)\s*(?:(?:ERROR|WARNING|INFO) \S+ \S+ \[[^\]]*\]\s*)?")
_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit)(?::\s.*)?$")
_TRACEBACK = "Traceback (most recent call last):"


def _last_lines_of_tracebacks(text: str) -> list[str]:
    """The exception line that ends each traceback in ``text``, in order."""
    found, inside = [], False
    for raw in text.splitlines():
        line = _PREFIX.sub("", raw.strip()).strip()
        if line == _TRACEBACK:
            inside = True
        elif inside and _EXCEPTION.match(line):
            found.append(line)
            inside = False
    return found


def last_exception(text: str) -> str | None:
    """The exception line that ends the last traceback in ``text`` (a process's own output), if any."""
    found = _last_lines_of_tracebacks(text)
    return found[-1] if found else None


def root_cause(logs: Path) -> str | None:
    """The first exception that ended a traceback in the Ray workers' output under ``logs`` (oldest
    file first: the first attempt fails first, and its innermost failure is printed first), preferring
    one that is not a ``RuntimeError`` (what the engine and Serve wrap a failure in); None if none."""
    files = sorted((p for pattern in ("worker-*.out", "worker-*.err") for p in logs.glob(pattern)),
                   key=lambda p: (p.stat().st_mtime, p.name))
    lines = [line for p in files for line in _last_lines_of_tracebacks(p.read_text(errors="replace"))]
    plain = [line for line in lines if not line.startswith("RuntimeError")]
    chosen = (plain or lines or [None])[0]
    return chosen[:300] if chosen else None


__all__ = ["last_exception", "root_cause"]
