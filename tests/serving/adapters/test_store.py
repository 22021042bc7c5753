"""The adapter store against a real local S3 server and in a local folder (the same tests, through either
implementation of its door): validation, atomic versioned push."""

from __future__ import annotations

import json

import pytest

from serving.adapters import AdapterStore, check_name
from serving.adapters.files import content_version, validate_adapter
from serving.config import AdapterStoreSpec
from serving.errors import AdapterExists, AdapterInvalid, AdapterNotFound, AdapterStoreUnavailable, BadAdapterName

from tests.support.adapter_store import bucket_keys, make_adapter


def test_push_resolve_list_remove(store, tmp_path):
    a = make_adapter(tmp_path / "a")
    ref = store.push(a, "maze-grpo", base="maze-tiny")
    assert ref.version == content_version(a) and ref.rank == 8
    assert store.resolve("maze-grpo") == ref
    keys = bucket_keys(store)
    assert keys == ["lora/_refs/maze-grpo.json", f"lora/maze-grpo@{ref.version}/adapter_config.json",
                    f"lora/maze-grpo@{ref.version}/adapter_model.safetensors"]
    assert [r.name for r in store.list()] == ["maze-grpo"]
    assert store.push(a, "maze-grpo") == ref  # identical files: no-op, no error
    store.remove("maze-grpo")
    with pytest.raises(AdapterNotFound, match="maze-grpo") as missing:
        store.resolve("maze-grpo")
    assert str(missing.value) == "adapter 'maze-grpo' not found"  # clients read it: no s3:// location
    assert store.list() == [] and bucket_keys(store) == []


def test_changed_adapter_is_refused_then_forced_to_a_new_version(store, tmp_path):
    v1 = store.push(make_adapter(tmp_path / "v1", seed=1), "a1")
    with pytest.raises(AdapterExists, match="force"):
        store.push(make_adapter(tmp_path / "v2", seed=2), "a1")
    v2 = store.push(tmp_path / "v2", "a1", force=True)
    assert v2.version != v1.version and store.resolve("a1").version == v2.version


def test_listing_paginates_past_1000(store):
    # Refs are tiny objects; write 1005 directly to exercise S3 pagination (1000 keys a page).
    body = json.dumps({"version": "abc", "base": None, "rank": 8, "pushed_at": "now"}).encode()
    for i in range(1005):
        store.objects.put(store.refs.key(f"ad{i:04d}"), body)
    names = store.list_names()
    assert len(names) == 1005 and names[0] == "ad0000" and names[-1] == "ad1004"


@pytest.mark.parametrize("bad", ["", "a/b", "a:b", "../x", "-x", "a b", "x" * 65, "é"])
def test_bad_names(bad):
    with pytest.raises(BadAdapterName):
        check_name(bad)


def test_validation_names_the_problem(tmp_path):
    a = make_adapter(tmp_path / "a", rank=64)
    with pytest.raises(AdapterInvalid, match="rank 64 exceeds"):
        validate_adapter(a, base_source=None, max_rank=32)
    b = make_adapter(tmp_path / "b", base="/models/other-model")
    with pytest.raises(AdapterInvalid, match="trained on"):
        validate_adapter(b, base_source="models/maze-tiny", max_rank=32)
    c = make_adapter(tmp_path / "c")
    (c / "adapter_model.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises(AdapterInvalid, match="does not load"):
        validate_adapter(c, base_source=None, max_rank=32)
    d = make_adapter(tmp_path / "d")
    cfg = json.loads((d / "adapter_config.json").read_text())
    (d / "adapter_config.json").write_text(json.dumps({**cfg, "peft_type": "PREFIX_TUNING"}))
    with pytest.raises(AdapterInvalid, match="not a LoRA"):
        validate_adapter(d, base_source=None, max_rank=32)
    e = make_adapter(tmp_path / "e")
    (e / "adapter_config.json").write_text(json.dumps({**cfg, "r": 4}))
    with pytest.raises(AdapterInvalid, match="rank 8, config says 4"):
        validate_adapter(e, base_source=None, max_rank=32)
    (tmp_path / "f").mkdir()
    with pytest.raises(AdapterInvalid, match="no adapter_config.json"):
        validate_adapter(tmp_path / "f", base_source=None, max_rank=32)


def test_invalid_adapter_uploads_nothing(store, tmp_path):
    with pytest.raises(AdapterInvalid):
        store.push(make_adapter(tmp_path / "big", rank=64), "big")
    assert bucket_keys(store) == []


def test_s3_down_is_unavailable_not_missing(s3_server, tmp_path):
    spec = AdapterStoreSpec(prefix="s3://adapters-down/lora", endpoint_url="http://127.0.0.1:9")
    store = AdapterStore(spec)
    with pytest.raises(AdapterStoreUnavailable, match="unreachable"):
        store.resolve("maze-grpo")
    with pytest.raises(AdapterStoreUnavailable):
        store.list()


def test_page_names(store, tmp_path):
    folder = make_adapter(tmp_path / "a")
    for name in ("a1", "a2", "a3"):
        store.push(folder, name)
    assert store.page_names(None, 2) == (["a1", "a2"], True)
    assert store.page_names("a2", 2) == (["a3"], False)
    assert store.page_names(None, 10) == (["a1", "a2", "a3"], False)
    assert store.page_names(None, None) == (["a1", "a2", "a3"], False)
    # Paging what a caller may see: has_more only when an accepted name follows, and `after` any
    # name, accepted, refused or missing, starts where it sorts.
    keep = lambda name: name != "a2"  # noqa: E731
    assert store.page_names(None, 1, keep) == (["a1"], True)
    assert store.page_names("a1", 1, keep) == (["a3"], False)
    assert store.page_names("a2", 1, keep) == store.page_names("a2x", 1, keep) == (["a3"], False)
    assert store.page_names("a3", 1, keep) == ([], False)
    assert store.page_names(None, None, lambda name: False) == ([], False)
    # `after` becomes part of an S3 key: anything but an adapter name is refused before S3 sees it
    for bad in ("\x00", "../a1", "a" * 65, "é"):
        with pytest.raises(BadAdapterName):
            store.page_names(bad, 2)
