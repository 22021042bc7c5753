"""A replica's adapter download that cannot complete (serving.engine.llm_server.VerifiedLoraLoader, from a
real local S3 server): a full cache disk is a clear AdapterLoadFailed (422 adapter_load_failed, what to
do, no path), S3 down a retryable 503 naming no endpoint, and other disk failures are left as they are."""

from __future__ import annotations

import asyncio
import builtins
import errno
from pathlib import Path

import pytest
from ray.llm._internal.serve.utils.lora_serve_utils import LoraMirrorConfig

import serving.adapters.files as adapter_files
from serving.adapters import AdapterStore
from serving.config import AdapterStoreSpec
from serving.engine.llm_server import VerifiedLoraLoader
from serving.errors import AdapterLoadFailed, AdapterStoreUnavailable
from serving.local import free_port
from tests.support.adapter_store import S3Server, make_adapter

pytestmark = pytest.mark.engine_seam  # the loader is Ray Serve LLM's, subclassed
PREFIX = "s3://download-failures/lora"


@pytest.fixture(scope="module")
def s3():
    server = S3Server()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def published(s3, tmp_path, monkeypatch) -> str:
    """A version published on a local S3 server, as the replica's loader sees the store (its env)."""
    for k, v in {"AWS_ENDPOINT_URL_S3": s3.url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    store = AdapterStore(AdapterStoreSpec(prefix=PREFIX, endpoint_url=s3.url))
    store.ensure_bucket()
    ref = store.push(make_adapter(tmp_path / "adapter"), "team-a-agent", force=True)
    return f"maze-tiny:team-a-agent@{ref.version}"


def _load(tmp_path: Path, model_id: str):
    folder = model_id.split(":", 1)[1]
    mirror = LoraMirrorConfig(lora_model_id=model_id, bucket_uri=f"{PREFIX}/{folder}", max_total_tokens=None,
                              sync_args=None)
    loader = VerifiedLoraLoader(lora_root=str(tmp_path / "cache"), download_timeout_s=5, max_tries=1)
    return asyncio.run(loader.load_model(model_id, mirror))


def _writes_of_downloads_go_to(monkeypatch, target: str | None = None, error: OSError | None = None) -> None:
    """The download's files (written as ``*.part``) go to ``target``, or fail with ``error``."""
    def fake_open(path, mode="r", *args, **kwargs):
        if str(path).endswith(".part"):
            if error is not None:
                raise error
            return builtins.open(target, mode)
        return builtins.open(path, mode, *args, **kwargs)

    monkeypatch.setattr(adapter_files, "open", fake_open, raising=False)


def test_the_download_itself_loads(published, tmp_path):
    assert Path(_load(tmp_path, published).local_path, "adapter_model.safetensors").is_file()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full for a real ENOSPC")
def test_a_full_cache_disk_is_a_clear_adapter_load_failure(published, tmp_path, monkeypatch):
    # /dev/full answers every write with the kernel's own ENOSPC, as a full filesystem does.
    _writes_of_downloads_go_to(monkeypatch, "/dev/full")
    with pytest.raises(AdapterLoadFailed) as caught:
        _load(tmp_path, published)
    err = caught.value
    lora_id = published.split(":", 1)[1]
    assert str(err) == (f"adapter {lora_id!r} could not be loaded: this replica's adapter cache disk is full (no "
                        "space left on device); free space there, then retry")
    assert err.status_code == 422 and err.to_openai()["error"]["code"] == "adapter_load_failed"
    assert str(tmp_path) not in str(err) and err.__cause__ is None


def test_an_enospc_without_errno_is_recognised_by_its_text(published, tmp_path, monkeypatch):
    """Filesystem layers that re-raise (pyarrow's, say) keep the OS message but not always its errno."""
    _writes_of_downloads_go_to(monkeypatch, error=OSError("Failed to write: No space left on device"))
    with pytest.raises(AdapterLoadFailed, match="adapter cache disk is full"):
        _load(tmp_path, published)


def test_other_disk_failures_are_not_called_a_full_disk(published, tmp_path, monkeypatch):
    _writes_of_downloads_go_to(monkeypatch, error=PermissionError(errno.EACCES, "Permission denied"))
    with pytest.raises(PermissionError):
        _load(tmp_path, published)


def test_s3_down_during_a_download_is_a_503_naming_no_endpoint(tmp_path, monkeypatch):
    port = free_port()  # nothing listens there
    for k, v in {"AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "x",
                 "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(AdapterStoreUnavailable) as caught:
        _load(tmp_path, "maze-tiny:team-a-agent@0123456789ab")
    err = caught.value
    assert err.status_code == 503 and "S3 unreachable (" in str(err) and str(err).endswith("try again in a few seconds")
    assert str(port) not in str(err) and "http" not in str(err) and "127.0.0.1" not in str(err)
