"""Adapter aliases against a real local S3 server and in a local folder (the store fixture runs each test
on both): promote, rollback, history, explicit versions, and the conditional write that keeps
concurrent moves from losing updates."""

from __future__ import annotations

import json

import pytest

from serving.adapters import AdapterStore, ModelId
from serving.adapters.objects import ObjectChanged
from serving.errors import AdapterNotFound, AdapterRefConflict, BadAdapterName, NoRollbackTarget

from tests.support.adapter_store import make_adapter
from tests.support.threads import run_together


@pytest.fixture
def two_versions(store, tmp_path):
    v1 = store.push(make_adapter(tmp_path / "v1", seed=1), "agent", base="maze-tiny")
    v2 = store.push(make_adapter(tmp_path / "v2", seed=2, rank=4), "agent", base="maze-tiny", force=True)
    assert v1.version != v2.version
    return v1, v2


def test_push_promote_rollback_history(store, two_versions):
    v1, v2 = two_versions
    assert store.resolve("agent").version == v2.version
    assert [(m.version, m.action) for m in store.history("agent")] == [(v2.version, "push"), (v1.version, "push")]

    promoted = store.promote("agent", v1.version)
    assert promoted.version == v1.version and promoted.rank == 8 and promoted.base == "maze-tiny"
    assert store.resolve("agent") == promoted
    assert promoted.pushed_at == store.history("agent")[-1].at  # when that version was pushed

    back = store.rollback("agent")
    assert back.version == v2.version and back.rank == 4
    # rollback returns to the version served before the last move; twice in a row toggles back
    assert store.rollback("agent").version == v1.version
    moves = store.history("agent")
    assert [(m.version, m.action) for m in moves] == [
        (v1.version, "rollback"), (v2.version, "rollback"), (v1.version, "promote"),
        (v2.version, "push"), (v1.version, "push")]
    assert moves == sorted(moves, key=lambda m: m.at, reverse=True)  # newest first


def test_promoting_the_current_version_changes_nothing(store, two_versions):
    _, v2 = two_versions
    before = store.history("agent")
    assert store.promote("agent", v2.version).version == v2.version
    assert store.history("agent") == before


def test_errors(store, two_versions, tmp_path):
    v1, _ = two_versions
    with pytest.raises(AdapterNotFound, match="'ghost'"):
        store.promote("ghost", v1.version)
    with pytest.raises(AdapterNotFound, match="no version 'abcdef012345'"):
        store.promote("agent", "abcdef012345")
    with pytest.raises(BadAdapterName, match="version"):
        store.promote("agent", "latest")
    with pytest.raises(AdapterNotFound):
        store.rollback("ghost")
    with pytest.raises(AdapterNotFound):
        store.history("ghost")
    only = store.push(make_adapter(tmp_path / "solo", seed=9), "solo")
    with pytest.raises(NoRollbackTarget, match=f"only ever served version {only.version}"):
        store.rollback("solo")
    # a version of another name is not a version of this one
    with pytest.raises(AdapterNotFound):
        store.promote("solo", v1.version)


def test_explicit_versions_resolve_whatever_the_alias_points_at(store, two_versions):
    v1, v2 = two_versions
    assert store.resolve("agent").version == v2.version
    pinned = store.resolve_version("agent", v1.version)
    assert (pinned.version, pinned.rank, pinned.base, pinned.folder) == (v1.version, 8, "maze-tiny", f"agent@{v1.version}")
    with pytest.raises(AdapterNotFound):
        store.resolve_version("agent", "0" * 12)
    assert ModelId.adapter(f"agent@{v1.version}") == ModelId(None, "agent", v1.version)
    assert ModelId.adapter("agent") == ModelId(None, "agent")
    for bad in ("agent@", "agent@123", "agent@ABCDEF012345", "a/b@abcdef012345"):
        with pytest.raises(BadAdapterName):
            ModelId.adapter(bad)


def test_ref_written_without_history_counts_as_one_push(store, tmp_path):
    ref = store.push(make_adapter(tmp_path / "old", seed=4), "legacy")
    legacy = {"version": ref.version, "base": None, "rank": 8, "pushed_at": "2026-01-01T00:00:00+00:00"}
    store.objects.put(store.refs.key("legacy"), json.dumps(legacy).encode())
    assert [(m.version, m.action, m.at) for m in store.history("legacy")] == [(ref.version, "push", legacy["pushed_at"])]
    new = store.push(make_adapter(tmp_path / "new", seed=5), "legacy", force=True)
    assert store.rollback("legacy").version == ref.version
    assert [m.version for m in store.history("legacy")] == [ref.version, new.version, ref.version]


def test_ref_write_is_conditional_on_the_etag_it_read(store, two_versions):
    """A writer that read the ref before another writer moved it must not overwrite that move."""
    v1, _ = two_versions
    _, stale_etag = store.refs.read("agent")
    store.promote("agent", v1.version)
    with pytest.raises(ObjectChanged):
        store.objects.put(store.refs.key("agent"), b"{}", if_match=stale_etag)
    with pytest.raises(ObjectChanged):
        store.objects.put(store.refs.key("agent"), b"{}", if_none_match=True)
    assert store.resolve("agent").version == v1.version


def test_concurrent_moves_lose_no_update(store, two_versions):
    """Rollbacks racing from several threads (each its own client): every one that returned is in the
    history, so no writer overwrote another's move (a rollback always moves, never a no-op)."""
    succeeded: list[str] = []

    def worker() -> None:
        local = AdapterStore(store.spec)
        for _ in range(5):
            try:
                succeeded.append(local.rollback("agent").version)
            except AdapterRefConflict:  # allowed under heavy contention: refused, not lost
                pass

    assert run_together([worker] * 4) == []
    moves = store.history("agent")
    assert succeeded and len(moves) == 2 + len(succeeded)
    assert sorted(m.version for m in moves if m.action == "rollback") == sorted(succeeded)
    assert all(moves[i].version != moves[i + 1].version for i in range(len(moves) - 1))
    assert store.resolve("agent").version == moves[0].version
