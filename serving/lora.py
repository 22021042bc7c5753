"""Replica side of the LoRA path: ``GatewayLLMServer`` (Ray Serve LLM's ``server_cls`` hook).

It swaps Ray's adapter loader for :class:`VerifiedLoraLoader`, which fixes two gaps of Ray
Serve LLM 2.60's loader:

* a download is verified before vLLM sees it (both files present, config is JSON, the weights
  parse as safetensors with LoRA tensors); Ray only logs per-file failures, so a partial or
  corrupt adapter could reach the engine. A failed check deletes the folder (so a retry
  downloads again) and raises :class:`~serving.errors.AdapterLoadFailed`;
* concurrent first requests for one adapter share one registration in vLLM (Ray's
  ``VLLMEngine.resolve_lora`` checks, then awaits the load, so the second request failed with
  "adapter has already been loaded");
* it does not read adapter_config.json through Ray's cached ``get_object_from_cloud`` (whose
  negative cache remembers an S3 outage as "missing" for 30 s): the gateway already resolved
  the versioned folder from the store's refs, so the loader downloads it directly.

Versioned folder names (``name@version``, immutable) make the disk cache safe: a re-pushed
adapter has a new folder, never a stale one under the old name.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import time

from ray import serve
from ray.llm._internal.common.utils.lora_utils import get_lora_id
from ray.llm._internal.serve.core.server.llm_server import LLMServer
from ray.llm._internal.serve.utils.lora_serve_utils import LoraMirrorConfig, LoraModelLoader

from serving.adapters import CONFIG, WEIGHTS
from serving.errors import AdapterLoadFailed
from serving.metrics import metric

log = logging.getLogger(__name__)


def verify_adapter_folder(path: str) -> None:
    """Raise :class:`AdapterLoadFailed` unless ``path`` holds a complete, loadable LoRA adapter."""
    from safetensors import safe_open

    for fname in (CONFIG, WEIGHTS):
        if not os.path.isfile(os.path.join(path, fname)) or os.path.getsize(os.path.join(path, fname)) == 0:
            raise AdapterLoadFailed(f"adapter download incomplete: {fname} missing or empty")
    try:
        with open(os.path.join(path, CONFIG)) as fh:
            json.load(fh)
        with safe_open(os.path.join(path, WEIGHTS), framework="numpy") as fh:
            keys = list(fh.keys())
    except Exception as exc:  # noqa: BLE001 - json/safetensors raise several types for corrupt files
        raise AdapterLoadFailed(f"adapter files do not load: {type(exc).__name__}: {exc}") from None
    if not any("lora_A" in k for k in keys):
        raise AdapterLoadFailed(f"{WEIGHTS} holds no LoRA tensors")


class VerifiedLoraLoader(LoraModelLoader):
    """Ray's loader (shared in-flight downloads, disk cache, retries) plus verification."""

    async def load_model_from_config(self, lora_model_id: str, llm_config):
        uri = f"{llm_config.lora_config.dynamic_lora_loading_path}/{get_lora_id(lora_model_id)}"
        mirror = LoraMirrorConfig(lora_model_id=lora_model_id, bucket_uri=uri, max_total_tokens=None, sync_args=None)
        name, _, version = get_lora_id(lora_model_id).partition("@")
        tags = {"adapter": name, "version": version}
        start = time.perf_counter()
        try:
            loaded = await self.load_model(lora_model_id, mirror)
        except Exception:
            metric("loads").inc(tags={"result": "error", **tags})
            raise
        metric("loads").inc(tags={"result": "ok", **tags})
        metric("load_latency").observe(time.perf_counter() - start, tags=tags)
        return loaded

    def _download_lora(self, lora_mirror_config: LoraMirrorConfig) -> str:
        path = super()._download_lora(lora_mirror_config)
        try:
            verify_adapter_folder(path)
        except AdapterLoadFailed as exc:
            shutil.rmtree(path, ignore_errors=True)
            raise AdapterLoadFailed(f"adapter {get_lora_id(lora_mirror_config.lora_model_id)!r}: {exc}") from None
        return path


class GatewayLLMServer(LLMServer):
    """Ray Serve LLM's ``LLMServer`` with the verifying adapter loader and race-free registration."""

    def _init_multiplex_loader(self, model_downloader_cls=None):
        self._lora_registrations: dict[str, asyncio.Future] = {}
        super()._init_multiplex_loader(model_downloader_cls or VerifiedLoraLoader)

    async def _maybe_resolve_lora_from_multiplex(self) -> None:
        model_id = serve.get_multiplexed_model_id()
        if not model_id:
            return
        if self._llm_config.lora_config is None:
            raise ValueError("Must setup lora config for multiplexed requests.")
        disk_lora_model = await self._load_model(model_id)
        task = self._lora_registrations.get(model_id)
        if task is None:
            task = asyncio.ensure_future(self.engine.resolve_lora(disk_lora_model))
            self._lora_registrations[model_id] = task
            task.add_done_callback(lambda _: self._lora_registrations.pop(model_id, None))
        await asyncio.shield(task)
