"""The store's one download of a version (``AdapterStore.download_version``: streamed and hashed as it
arrives, what a replica loads) and its checked form (``AdapterStore.fetch``: what a parity measurement
reads), from a real local S3 server and from a local folder (the store fixture runs each test on both)."""

from __future__ import annotations

import pytest

from serving.adapters import CONFIG, WEIGHTS
from serving.adapters.files import content_version
from serving.errors import AdapterIntegrityError, AdapterLoadFailed, AdapterNotFound
from tests.support.adapter_store import make_adapter


def test_the_download_hashes_to_the_version_and_holds_the_published_bytes(store, tmp_path):
    folder = make_adapter(tmp_path / "src", seed=3)
    ref = store.push(folder, "dl", max_rank=32)
    dest = tmp_path / "dest"
    assert store.download_version("dl", ref.version, dest) == ref.version == content_version(folder)
    assert (dest / WEIGHTS).read_bytes() == (folder / WEIGHTS).read_bytes()
    assert sorted(p.name for p in dest.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    assert store.download_version("dl", ref.version, tmp_path / "plain", hashed=False) is None


def test_overwritten_weights_hash_to_another_version(store, tmp_path):
    ref = store.push(make_adapter(tmp_path / "src", seed=3), "dl", max_rank=32)
    other = make_adapter(tmp_path / "other", seed=4)
    store.objects.put(store.versions.key("dl", ref.version, WEIGHTS), (other / WEIGHTS).read_bytes())
    assert store.download_version("dl", ref.version, tmp_path / "dest") != ref.version


def test_a_missing_file_is_an_incomplete_download(store, tmp_path):
    with pytest.raises(AdapterLoadFailed, match="adapter_config.json is missing"):
        store.download_version("nothing", "0123456789ab", tmp_path / "dest")


def test_fetch_is_the_download_checked_as_verify_checks(store, tmp_path):
    folder = make_adapter(tmp_path / "src", seed=3)
    ref = store.push(folder, "dl", max_rank=32)
    dest = store.fetch("dl", ref.version, tmp_path / "dest")
    assert (dest / CONFIG).read_bytes() == (folder / CONFIG).read_bytes()
    with pytest.raises(AdapterNotFound, match="no version '0123456789ab'"):
        store.fetch("dl", "0123456789ab", tmp_path / "none")
    other = make_adapter(tmp_path / "other", seed=4)
    store.objects.put(store.versions.key("dl", ref.version, WEIGHTS), (other / WEIGHTS).read_bytes())
    with pytest.raises(AdapterIntegrityError) as err:
        store.fetch("dl", ref.version, tmp_path / "changed")
    assert str(err.value) == str(pytest.raises(AdapterIntegrityError, store.verify, "dl", ref.version).value)
    store.objects.delete(store.versions.key("dl", ref.version, WEIGHTS))
    with pytest.raises(AdapterIntegrityError, match=f"{WEIGHTS} is missing from the store: it was deleted"):
        store.fetch("dl", ref.version, tmp_path / "gone")
