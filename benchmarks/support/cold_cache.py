"""A fresh machine's caches, recreated on this one: the page cache of the files a stack reads dropped,
and the compile caches a process writes on first use pointed at empty folders.

A new machine has read none of the venv's libraries (torch, vLLM, Ray: gigabytes) and compiled none
of torch inductor's kernels; a machine that has run the stack once has both cached, which is why a
second start and evaluation can be much faster than the first. Dropping the kernel's page cache for
everything needs root (``/proc/sys/vm/drop_caches``); ``posix_fadvise(DONTNEED)`` asks the kernel to
drop one file's clean pages and works for any file we can open, so :func:`evict` walks the trees the
stack reads. Pages a running process has mapped stay: call it with the stack stopped.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

#: The environment variables that move each compile cache a serving process writes on first use.
CACHE_VARS = ("TORCHINDUCTOR_CACHE_DIR", "VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "XDG_CACHE_HOME")


def stack_trees(root: Path) -> list[Path]:
    """What a stack's processes read from disk: the venv's packages, the interpreter's standard
    library and the repository (its models among them)."""
    trees = {Path(sysconfig.get_paths()["purelib"]), Path(sysconfig.get_paths()["stdlib"]), root,
             Path(sys.prefix)}
    return sorted(t.resolve() for t in trees if t.exists())


def evict(trees: list[Path]) -> dict:
    """Drop the page cache of every regular file under ``trees``; files and bytes asked for."""
    files = size = 0
    for tree in trees:
        for dirpath, _dirs, names in os.walk(tree):
            for name in names:
                path = os.path.join(dirpath, name)
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                except OSError:
                    continue
                try:
                    n = os.fstat(fd).st_size
                    os.fdatasync(fd)  # dirty pages (a file written moments ago) are not dropped
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                except OSError:
                    continue
                else:
                    files, size = files + 1, size + n
                finally:
                    os.close(fd)
    return {"files": files, "bytes": size}


def resident_bytes(paths: list[Path]) -> int | None:
    """Bytes of ``paths`` in the page cache now (util-linux ``fincore``), or None without it."""
    try:
        out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", *map(str, paths)],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return sum(int(line) for line in out.split() if line.isdigit())


def empty_caches(base: Path) -> dict[str, str]:
    """Environment variables pointing every compile cache in :data:`CACHE_VARS` at a new empty folder."""
    env = {}
    for var in CACHE_VARS:
        folder = base / var.lower()
        folder.mkdir(parents=True, exist_ok=True)
        env[var] = str(folder)
    return env


__all__ = ["CACHE_VARS", "empty_caches", "evict", "resident_bytes", "stack_trees"]
