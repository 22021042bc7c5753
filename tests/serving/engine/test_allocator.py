"""serving.engine.allocator: the engine processes get jemalloc where it is installed, else glibc with a
fixed mmap threshold; a config's own LD_PRELOAD or MALLOC_* settings win."""

from __future__ import annotations

import pytest

from serving.app import llm_config_dicts
from serving.config import ServingConfig
from serving.engine import allocator

LIB = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


@pytest.fixture
def jemalloc(monkeypatch):
    """Where find_jemalloc says the library is (None: not installed)."""
    def set_path(path):
        monkeypatch.setattr(allocator, "find_jemalloc", lambda: path)
    return set_path


def test_jemalloc_is_preloaded_where_installed(jemalloc):
    jemalloc(LIB)
    assert allocator.allocator_env("jemalloc", {"VLLM_CPU_KVCACHE_SPACE": "1"}) == {"LD_PRELOAD": LIB}
    assert allocator.describe_allocator("jemalloc", {}) == f"engine allocator: jemalloc ({LIB})"


def test_without_jemalloc_glibc_gets_a_fixed_threshold(jemalloc):
    jemalloc(None)
    assert allocator.allocator_env("jemalloc", {}) == {"MALLOC_MMAP_THRESHOLD_": "65536"}
    assert "libjemalloc2 not found" in allocator.describe_allocator("jemalloc", {})
    # A threshold the config sets itself is kept.
    assert allocator.allocator_env("jemalloc", {"MALLOC_MMAP_THRESHOLD_": "131072"}) == {}


def test_system_and_an_explicit_preload_change_nothing(jemalloc):
    jemalloc(LIB)
    assert allocator.allocator_env("system", {}) == {}
    assert allocator.allocator_env("jemalloc", {"LD_PRELOAD": "/opt/tcmalloc.so"}) == {}
    assert allocator.describe_allocator("system", {}) == "engine allocator: glibc"


def test_the_engine_env_carries_the_choice(jemalloc):
    jemalloc(LIB)
    embedded = ServingConfig.shipped("embedded")
    assert embedded.allocator == "jemalloc"
    (llm,) = llm_config_dicts(embedded)
    assert llm["runtime_env"]["env_vars"]["LD_PRELOAD"] == LIB
    # Production (the k8s rendering) keeps the image's allocator: nothing machine-specific in its YAML.
    production = ServingConfig.shipped("production")
    assert production.allocator == "system"
    assert all("LD_PRELOAD" not in d["runtime_env"]["env_vars"] for d in llm_config_dicts(production))


def test_the_library_found_here_preloads_into_a_python_process():
    """The test set-up installs libjemalloc2 (scripts/install_system_deps.sh); what find_jemalloc
    returns must be preloadable (it cannot be dlopen'ed late: static TLS)."""
    import os
    import subprocess
    import sys

    path = allocator.find_jemalloc()
    assert path is not None, "libjemalloc.so.2 not found: run scripts/install_system_deps.sh"
    maps = subprocess.run([sys.executable, "-c", "print(open('/proc/self/maps').read())"], env={
        **os.environ, "LD_PRELOAD": path}, capture_output=True, text=True, check=True, timeout=60)
    assert "libjemalloc.so.2" in maps.stdout and "cannot be preloaded" not in maps.stderr
