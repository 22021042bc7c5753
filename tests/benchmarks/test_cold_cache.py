"""benchmarks/support/cold_cache.py: a fresh machine's page cache and compile caches, recreated."""

from __future__ import annotations

import os
import shutil

import pytest

from benchmarks.support.cold_cache import CACHE_VARS, empty_caches, evict, resident_bytes


@pytest.mark.skipif(shutil.which("fincore") is None, reason="util-linux fincore reads the page cache")
def test_evict_drops_a_files_cached_pages(tmp_path):
    f = tmp_path / "blob"
    f.write_bytes(os.urandom(4 << 20))
    f.read_bytes()  # written and read: cached
    assert resident_bytes([f]) > 0
    done = evict([tmp_path])
    assert done == {"files": 1, "bytes": 4 << 20}
    assert resident_bytes([f]) == 0


def test_empty_caches_points_every_cache_at_a_new_empty_folder(tmp_path):
    env = empty_caches(tmp_path)
    assert sorted(env) == sorted(CACHE_VARS)
    assert len(set(env.values())) == len(CACHE_VARS)
    assert all(os.path.isdir(p) and not os.listdir(p) for p in env.values())
