"""Where a deploying driver's output goes: Ray and vLLM write their own log records (and JSON
logging config) into whatever process starts them; the embedded stack keeps all of that off the
user's console and out of the caller's logging set-up."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path


@contextlib.contextmanager
def output_to(path: Path):
    """This process's stdout and stderr go to ``path`` meanwhile: at the descriptor level, so Ray's
    and vLLM's log records, which their own handlers write, land there too, not on the console."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "ab") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in zip((1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)


@contextlib.contextmanager
def caller_logging_kept():
    """Ray's driver set-up installs its own (JSON) logging config on the root logger; the calling
    program (maze-eval, a notebook) keeps its own console format and level afterwards."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    formatters = [h.formatter for h in handlers]
    try:
        yield
    finally:
        root.setLevel(level)
        root.handlers[:] = handlers
        for handler, formatter in zip(handlers, formatters, strict=True):
            handler.setFormatter(formatter)


__all__ = ["caller_logging_kept", "output_to"]
