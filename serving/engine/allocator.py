"""The memory allocator of the engine processes (``ServingConfig.allocator``).

A CPU engine that serves images for hours allocates and frees many blocks of 64 KiB and more
(activations, image tensors). glibc's malloc raises its mmap threshold as such blocks are freed and
then serves them from a heap that fragments and keeps growing. Two ways keep the memory flat:
jemalloc (preloaded into the engine processes), or glibc with a fixed ``MALLOC_MMAP_THRESHOLD_``,
which maps and unmaps every such block and so costs CPU on every request (docs/benchmarks.md,
paired_ab and soak). jemalloc is used where its library is installed (Debian: ``libjemalloc2``);
elsewhere the fixed threshold is the fallback.
"""

from __future__ import annotations

import ctypes.util
from pathlib import Path

__all__ = ["FALLBACK_ENV", "allocator_env", "describe_allocator", "find_jemalloc"]

# Where distributions install the library (ld.so.cache may not list a path a container adds).
JEMALLOC_PATHS = (
    "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
    "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2",
    "/usr/lib64/libjemalloc.so.2",
    "/usr/lib/libjemalloc.so.2",
)
# glibc maps (and returns to the system) every block of 64 KiB and up.
FALLBACK_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536"}


def find_jemalloc() -> str | None:
    """The path of libjemalloc on this machine, or None."""
    for path in JEMALLOC_PATHS:
        if Path(path).is_file():
            return path
    name = ctypes.util.find_library("jemalloc")
    if name is None:
        return None
    return next((str(p) for d in ("/usr/lib", "/usr/lib64", "/lib") for p in Path(d).rglob(name)), None)


def allocator_env(allocator: str, env: dict[str, str]) -> dict[str, str]:
    """The variables that select ``allocator`` ('system' or 'jemalloc') in the engine processes, given
    the config's own ``env`` (its LD_PRELOAD or MALLOC_* settings are kept: they were asked for)."""
    if allocator != "jemalloc" or "LD_PRELOAD" in env:
        return {}
    lib = find_jemalloc()
    if lib is None:
        return {k: v for k, v in FALLBACK_ENV.items() if k not in env}
    return {"LD_PRELOAD": lib}


def describe_allocator(allocator: str, env: dict[str, str]) -> str:
    """One line for ``up``'s progress: which allocator the engines get."""
    chosen = {**allocator_env(allocator, env), **env}
    if "LD_PRELOAD" in chosen and "jemalloc" in chosen["LD_PRELOAD"]:
        return f"engine allocator: jemalloc ({chosen['LD_PRELOAD']})"
    if "MALLOC_MMAP_THRESHOLD_" in chosen:
        extra = " (libjemalloc2 not found; install it for less CPU per request)" if allocator == "jemalloc" else ""
        return f"engine allocator: glibc, mmap threshold {chosen['MALLOC_MMAP_THRESHOLD_']}{extra}"
    return "engine allocator: glibc"
