"""The adapter store's door (serving.adapters.objects.ObjectStore): the same contract from S3 (a real local
S3 server) and from a local folder (``file://``): the store fixture runs each test on both."""

from __future__ import annotations

import threading

import pytest

from serving.adapters import AdapterStore, open_objects
from serving.adapters.local import LocalObjects
from serving.adapters.objects import ObjectChanged
from serving.adapters.objects import Scoped
from serving.config import AdapterStoreSpec
from serving.errors import AdapterRefConflict


@pytest.fixture
def objects(store):
    return store.objects


def test_put_get_head_delete(objects):
    assert objects.put("a/b.bin", b"\x00bytes") is None
    assert objects.get("a/b.bin") == b"\x00bytes" and objects.head("a/b.bin") == 6
    data, etag = objects.get_tagged("a/b.bin")
    assert data == b"\x00bytes" and etag
    objects.put("a/b.bin", b"other")
    assert objects.get_tagged("a/b.bin")[1] != etag  # another content, another ETag
    objects.delete("a/b.bin")
    objects.delete("a/b.bin")  # deleting what is not there is no error
    for read in (objects.get, objects.head, objects.stream):
        with pytest.raises(KeyError):
            read("a/b.bin")
    assert objects.read_json("a/b.json") == (None, None)


def test_stream_gives_the_bytes_in_chunks(objects):
    body = bytes(range(256)) * 41
    objects.put("big", body)
    chunks = list(objects.stream("big", chunk_size=1000))
    assert b"".join(chunks) == body and max(len(c) for c in chunks) <= 1000 and len(chunks) >= 11


def test_one_listing_in_key_order_paged_and_from_a_key(objects):
    keys = ["_refs/a.json", "_refs/b.json", "_refs/c.json", "a@1/x", "a@1/y", "ab@1/x", "b@1/x"]
    for key in reversed(keys):
        objects.put(key, b"{}")
    assert list(objects.list()) == keys
    assert list(objects.list("_refs/")) == keys[:3]
    assert list(objects.list("a@")) == ["a@1/x", "a@1/y"]
    assert list(objects.list("_refs/", start_after="_refs/a.json")) == keys[1:3]
    assert list(objects.list("_refs/", start_after="_refs/aa.json")) == keys[1:3]  # any key: where it sorts
    assert list(objects.list(page_size=2)) == keys  # pages followed
    listing = objects.list(page_size=2)
    assert [next(listing), next(listing)] == keys[:2]  # a caller may stop after any key
    assert list(objects.list("nothing/")) == []


def test_conditional_puts(objects):
    objects.put_json("doc.json", {"n": 1})
    doc, etag = objects.read_json("doc.json")
    assert doc == {"n": 1}
    with pytest.raises(ObjectChanged):
        objects.put_json("doc.json", {"n": 2}, if_none_match=True)  # there is one
    objects.put_json("doc.json", {"n": 2}, if_match=etag)
    with pytest.raises(ObjectChanged):
        objects.put_json("doc.json", {"n": 3}, if_match=etag)  # stale
    assert objects.read_json("doc.json")[0] == {"n": 2}
    with pytest.raises(KeyError):
        objects.put_json("gone.json", {"n": 1}, if_match=etag)  # nothing to match
    objects.put_json("new.json", {"n": 1}, if_none_match=True)
    assert objects.read_json("new.json")[0] == {"n": 1}


def test_replace_json_loses_no_update_across_racing_writers(store):
    """Each thread its own store (its own client or lock file handle), as separate processes would be."""
    done: list[int] = []

    def worker() -> None:
        own = AdapterStore(store.spec).objects
        for _ in range(5):
            try:
                own.replace_json("counter.json", lambda doc: {"n": (doc or {"n": 0})["n"] + 1}, "the counter")
                done.append(1)
            except AdapterRefConflict:  # allowed under heavy contention: refused, not lost
                pass

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert done and store.objects.read_json("counter.json")[0] == {"n": len(done)}


def test_replace_json_leaves_or_refuses(objects):
    assert objects.replace_json("doc.json", lambda doc: None, "the doc") is None  # left as it is: nothing written
    assert list(objects.list()) == []
    assert objects.replace_json("doc.json", lambda doc: {"v": 1}, "the doc") == {"v": 1}

    def refuse(doc):
        raise ValueError("no")

    with pytest.raises(ValueError):
        objects.replace_json("doc.json", refuse, "the doc")
    assert objects.read_json("doc.json")[0] == {"v": 1}


def test_a_scoped_handle_sees_its_prefix_only(objects):
    objects.put("_refs/a.json", b"{}")
    scoped = objects.scoped("_placement/")
    scoped.put_json("pins.json", {"pins": {}})
    scoped.put("replicas/r1.json", b"{}")
    assert list(scoped.list()) == ["pins.json", "replicas/r1.json"]
    assert list(scoped.list("replicas/")) == ["replicas/r1.json"]
    assert list(scoped.list(start_after="pins.json")) == ["replicas/r1.json"]
    assert objects.get("_placement/pins.json") == scoped.get("pins.json")
    deeper = scoped.scoped("replicas/")
    assert isinstance(deeper, Scoped) and list(deeper.list()) == ["r1.json"] and deeper.head("r1.json") == 2
    deeper.delete("r1.json")
    assert list(objects.list()) == ["_placement/pins.json", "_refs/a.json"]


def test_the_prefix_scheme_picks_the_implementation(tmp_path):
    local = open_objects(AdapterStoreSpec(prefix=f"file://{tmp_path}/store"))
    assert isinstance(local, LocalObjects) and local.folder == tmp_path / "store"
    assert type(open_objects(AdapterStoreSpec(prefix="s3://bucket/p"))).__name__ == "S3Objects"
    for bad in ("file://relative/path", "file:///", "gs://bucket/p"):
        with pytest.raises(ValueError, match="must look like s3://bucket/prefix"):
            AdapterStoreSpec(prefix=bad)


# -- what is the local folder's own -----------------------------------------------------------------
def test_a_local_store_writes_whole_files_and_keeps_its_own_names_out(tmp_path):
    objects = open_objects(AdapterStoreSpec(prefix=f"file://{tmp_path}/store"))
    objects.put_json("_refs/a.json", {"v": 1}, if_none_match=True)  # takes the folder's lock
    objects.put("a@1/x", b"x")
    on_disk = sorted(str(p.relative_to(tmp_path / "store")) for p in (tmp_path / "store").rglob("*") if p.is_file())
    assert on_disk == [".lock", "_refs/a.json", "a@1/x"]  # no temporary file left behind
    (tmp_path / "store" / "_refs" / ".a.json.tmp.part").write_bytes(b"half")  # a writer's temporary file
    assert list(objects.list()) == ["_refs/a.json", "a@1/x"]
    for bad in ("../outside", "a/../../b", ".lock", "a//b", ""):
        with pytest.raises(ValueError, match="not an object key"):
            objects.put(bad, b"x")
        with pytest.raises(KeyError):
            objects.get(bad)
    objects.delete("a@1/x")
    assert not (tmp_path / "store" / "a@1").exists()  # the folders a removal empties go with it
