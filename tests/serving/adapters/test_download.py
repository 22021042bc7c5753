"""A replica's download of a version (serving.adapters.files.download_version): streamed from the real
local S3 server and hashed as it arrives."""

from __future__ import annotations

import pytest

from serving.adapters import WEIGHTS, content_version, download_version
from serving.errors import AdapterLoadFailed
from tests.support.adapter_store import make_adapter


def test_the_download_hashes_to_the_version_and_holds_the_published_bytes(store, tmp_path):
    folder = make_adapter(tmp_path / "src", seed=3)
    ref = store.push(folder, "dl", max_rank=32)
    dest = tmp_path / "dest"
    assert download_version(store.s3, f"{store.root}dl@{ref.version}/", dest) == ref.version == content_version(folder)
    assert (dest / WEIGHTS).read_bytes() == (folder / WEIGHTS).read_bytes()
    assert sorted(p.name for p in dest.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]


def test_overwritten_weights_hash_to_another_version(store, tmp_path):
    ref = store.push(make_adapter(tmp_path / "src", seed=3), "dl", max_rank=32)
    other = make_adapter(tmp_path / "other", seed=4)
    store.s3.call("put_object", Key=f"{store.root}dl@{ref.version}/{WEIGHTS}", Body=(other / WEIGHTS).read_bytes())
    assert download_version(store.s3, f"{store.root}dl@{ref.version}/", tmp_path / "dest") != ref.version


def test_a_missing_file_is_an_incomplete_download(store, tmp_path):
    with pytest.raises(AdapterLoadFailed, match="adapter_config.json is missing"):
        download_version(store.s3, f"{store.root}nothing@0123456789ab/", tmp_path / "dest")
