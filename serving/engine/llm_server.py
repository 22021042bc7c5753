"""Replica side of the LoRA path: ``GatewayLLMServer`` (Ray Serve LLM's ``server_cls`` hook).

It swaps Ray's adapter loader for :class:`VerifiedLoraLoader`, which fixes these gaps of Ray
Serve LLM's loader (the same in 2.58.1 and 2.60.0; Ray's names come through :mod:`serving.compat`):

* a download is verified before vLLM sees it (both files present, config is JSON, the weights
  parse as safetensors with LoRA tensors, and the files hash to the version they were fetched as:
  the loader streams them from the store itself (:meth:`AdapterStore.download_version
  <serving.adapters.AdapterStore.download_version>`) and hashes the bytes as they arrive, so the
  check costs no second read); Ray only logs per-file failures, so a partial, corrupt or overwritten
  adapter could reach the engine. A failed check deletes the folder (so a retry downloads again) and raises
  :class:`~serving.errors.AdapterLoadFailed` (:class:`~serving.errors.AdapterIntegrityError` for a
  hash that is not the version's);
* when vLLM registers an adapter, the engine's worker reports which of its modules it applied
  (:mod:`serving.engine.lora_coverage`); a version with trained modules left out is removed from the
  engine and refused (:class:`~serving.errors.AdapterNotApplied`) for the replica's lifetime, so no
  request is answered by the base model in its name;
* concurrent first requests for one adapter share one registration in vLLM (Ray's
  ``VLLMEngine.resolve_lora`` checks, then awaits the load, so the second request failed with
  "adapter has already been loaded");
* it does not read adapter_config.json through Ray's cached ``get_object_from_cloud`` (whose
  negative cache remembers an S3 outage as "missing" for 30 s): the gateway already resolved
  the versioned folder from the store's refs, so the loader downloads it directly.

Versioned folder names (``name@version``, immutable) make the disk cache safe: a re-pushed
adapter has a new folder, never a stale one under the old name.

Residency is Ray's per-replica LRU (``max_num_adapters_per_replica`` = vLLM's ``max_loras``) with
three changes (:class:`PinnedLRU`): pinned names (``serving.placement``) are never evicted and are
loaded on every replica without waiting for a request; an evicted adapter is removed from the
engine too, so what Ray routes by and what vLLM holds stay the same set; and each replica reports
what it holds (last use, pinned) to the store and in its metrics.

Each chat and completions request is timed on the replica for the ingress's ``Server-Timing``
header (adapter load, vLLM's first-token instant, the first item out); the parts leave with the
request's first item (:mod:`serving.engine.replica_timing`).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import shutil
import time

from ray import serve

from serving.adapters import AdapterStore, ModelId, spec_from_env, verify_adapter_folder
from serving.compat import (
    MULTIPLEX_ATTR,
    LLMServer,
    LoraMirrorConfig,
    LoraModelLoader,
    ModelMultiplexWrapper,
    connect_tokenization,
    engine_client,
    served_models,
)
from serving.engine import cpu_affinity, replica_timing
from serving.engine.lora_coverage import module_count, refusal, take_report
from serving.errors import (
    AdapterIntegrityError,
    AdapterLoadFailed,
    AdapterNotApplied,
    ServingError,
)
from serving.metrics import metric

log = logging.getLogger(__name__)
TIMED_METHODS = frozenset({"chat", "completions"})  # the token routes: their first item carries the replica's parts


class VerifiedLoraLoader(LoraModelLoader):
    """Ray's loader (shared in-flight downloads, disk cache, retries) plus verification."""

    async def load_model_from_config(self, lora_model_id: str, llm_config):
        adapter = ModelId.parse(lora_model_id)
        uri = f"{llm_config.lora_config.dynamic_lora_loading_path}/{adapter.adapter_part}"
        mirror = LoraMirrorConfig(lora_model_id=lora_model_id, bucket_uri=uri, max_total_tokens=None, sync_args=None)
        tags = metric_tags(adapter)
        start = time.perf_counter()
        try:
            loaded = await self.load_model(lora_model_id, mirror)
        except Exception:
            metric("loads").inc(tags={"result": "error", **tags})
            raise
        metric("loads").inc(tags={"result": "ok", **tags})
        metric("load_latency").observe(time.perf_counter() - start, tags=tags)
        return loaded

    def _fetch(self, lora_mirror_config: LoraMirrorConfig) -> tuple[str, str]:
        """Download the version into the disk cache (one process at a time per folder, as Ray's own
        download), hashing it as it arrives; returns the folder and the files' content version."""
        from filelock import FileLock

        path = self._model_dir_path(lora_mirror_config.lora_model_id)
        store_prefix, _, folder = lora_mirror_config.bucket_uri.rstrip("/").rpartition("/")
        adapter = ModelId.adapter(folder, check=False)
        store = self._store(store_prefix)
        with FileLock(path + ".lock", timeout=self.download_timeout_s or -1):
            actual = store.download_version(adapter.name, adapter.version or "", path)
        return path, actual

    def _store(self, prefix: str) -> AdapterStore:
        """The adapter store, one per loader (its S3 client costs more to make than a small download)."""
        stores = self.__dict__.setdefault("_stores", {})
        if prefix not in stores:
            stores[prefix] = AdapterStore(spec_from_env(prefix))
        return stores[prefix]

    def _download_lora(self, lora_mirror_config: LoraMirrorConfig) -> str:
        lora_id = ModelId.parse(lora_mirror_config.lora_model_id).adapter_part
        start = time.perf_counter()
        try:  # S3 down or gone mid-transfer: the store's retryable 503, naming no endpoint (its cause does)
            path, actual = self._fetch(lora_mirror_config)
        except OSError as exc:
            if exc.errno != errno.ENOSPC and "No space left" not in str(exc):
                raise
            # The replica's disk, not the adapter: the path stays in the log, the client gets what to do.
            log.error("no space left in the adapter cache %s for %s: %s", self.lora_root, lora_id, exc)
            raise AdapterLoadFailed(f"adapter {lora_id!r} could not be loaded: this replica's adapter cache disk "
                                    "is full (no space left on device); free space there, then retry") from None
        try:
            verify_adapter_folder(path)
            checked = time.perf_counter()
            check_version(lora_id, actual)
            LOAD_SECONDS[lora_id] = {"download": checked - start, "integrity": time.perf_counter() - checked}
        except AdapterLoadFailed as exc:
            shutil.rmtree(path, ignore_errors=True)
            reason = "integrity" if isinstance(exc, AdapterIntegrityError) else "incomplete"
            metric("refusals").inc(tags={**metric_tags(ModelId.adapter(lora_id, check=False)), "reason": reason})
            raise type(exc)(f"adapter {lora_id!r}: {exc}") from None
        return path


def check_version(lora_id: str, actual: str) -> None:
    """Raise :class:`AdapterIntegrityError` unless ``actual`` (the downloaded files' content hash) is
    ``lora_id``'s version (``name@version``; the version is the content hash the store named them by)."""
    version = ModelId.adapter(lora_id, check=False).version
    if not version:
        return  # an unversioned id is not the gateway's (it always resolves name -> name@version)
    if actual != version:
        raise AdapterIntegrityError(
            f"its stored files hash to {actual}, not to version {version}: they changed in the store after "
            "publishing, so they are not what was published; publish the adapter again (or roll back) and "
            "check the store with `maze-serve adapters verify`")


def metric_tags(adapter: ModelId) -> dict[str, str]:
    """An adapter's labels on the replica's metrics (its name and version; empty where it has none)."""
    return {"adapter": adapter.name or "", "version": adapter.version or ""}


#: Download and integrity-check seconds of the downloads not registered yet, by adapter id (read once at
#: registration, where the load's phases are counted together).
LOAD_SECONDS: dict[str, dict[str, float]] = {}

class PinnedLRU(ModelMultiplexWrapper):
    """Ray's per-replica adapter LRU that never evicts a pinned adapter, removes an evicted one from
    the engine, and keeps each adapter's last use (for ``adapters where``)."""

    def __init__(self, func, max_models: int, server: GatewayLLMServer):
        super().__init__(func, None, max_models)
        self.server = server
        self.last_used: dict[str, float] = {}
        self.evictions = 0

    async def load_model(self, model_id: str):
        new = model_id not in self.models
        self.last_used[model_id] = time.time()
        loaded = await super().load_model(model_id)
        if new:  # the report follows once the adapter is in (an eviction on the way marks it too)
            self.server.placement_changed()
        return loaded

    async def unload_model_lru(self) -> None:
        victim = next((m for m in self.models if m not in self.server.pinned_ids), None)
        if victim is None:  # every slot pinned: pins are bounded below the slots, so only while they change
            victim = next(iter(self.models))
        self.models.move_to_end(victim, last=False)  # Ray unloads the first entry
        await super().unload_model_lru()
        self.last_used.pop(victim, None)
        self.evictions += 1
        metric("evictions").inc(tags=metric_tags(ModelId.parse(victim)))
        await self.server.remove_from_engine(victim)
        self.server.placement_changed()


class GatewayLLMServer(LLMServer):
    """Ray Serve LLM's ``LLMServer`` with the verifying adapter loader, race-free registration, pinned
    adapters and placement reports; the :class:`serving.placement.Replica` that placement drives."""

    pinned_ids: set[str]  # placement's to write (serving.placement.Replica)
    placement_dirty: bool

    def _init_multiplex_loader(self, model_downloader_cls=None):
        self._lora_registrations: dict[str, asyncio.Future] = {}
        self._refused: dict[str, ServingError] = {}  # versions the engine would not apply whole: immutable, so final
        self.pinned_ids: set[str] = set()
        self._lru: PinnedLRU | None = None
        self._placement_task: asyncio.Task | None = None
        self.placement_dirty = True  # the replica's report must be (re)written
        super()._init_multiplex_loader(model_downloader_cls or VerifiedLoraLoader)
        func = getattr(self._load_model, "__wrapped__", None)
        mx = self._llm_config.multiplex_config()
        if func is not None and mx is not None:
            try:  # Ray's wrapper finds its LRU on the function: put ours there first
                self._lru = PinnedLRU(func, mx.max_num_models_per_replica, self)
                setattr(func, MULTIPLEX_ATTR, self._lru)
            except Exception:  # noqa: BLE001 - outside a Serve replica (no context): Ray's own LRU
                log.debug("no replica context: Ray's adapter LRU kept", exc_info=True)

    async def start(self):
        with cpu_affinity.engine_start():  # a replica Serve restarted after `up` moved the session
            await super().start()
        # The ingress counts the prompt of a request its client left with the engine's tokenize.
        if not connect_tokenization(self.engine):
            log.warning("the engine has no tokenize: a request left before its answer is charged no prompt tokens")
        client = engine_client(self.engine)
        if client is not None:  # each request's first-token instant, for its Server-Timing parts
            replica_timing.time_first_token(client)
        await self._install_coverage_check()
        if self._lru is not None and self._llm_config.lora_config is not None:
            from serving.placement import run_placement

            self._placement_task = asyncio.ensure_future(run_placement(self))

    def placement_changed(self) -> None:
        self.placement_dirty = True

    async def _run_request(self, request, *, engine_method: str, batch_output_stream: bool = False,
                           raw_request_info=None):
        """Ray's request run, timed for the ingress's ``Server-Timing`` header on the token routes: the
        adapter load, the first token and the first item out, sent back with that item
        (:mod:`serving.engine.replica_timing`)."""
        run = {"engine_method": engine_method, "batch_output_stream": batch_output_stream,
               "raw_request_info": raw_request_info}
        if engine_method not in TIMED_METHODS:
            return await super()._run_request(request, **run)
        clock = replica_timing.ReplicaClock(adapter=bool(serve.get_multiplexed_model_id()),
                                           stream=bool(getattr(request, "stream", False)))
        # Set while Ray builds the stream: its batcher's reader task starts the engine with this context.
        token = replica_timing.REPLICA_CLOCK.set(clock)
        try:
            stream = await super()._run_request(request, **run)
        except Exception as exc:
            replica_timing.stamp_error(exc, clock.parts())
            raise
        finally:
            replica_timing.REPLICA_CLOCK.reset(token)
        clock.loaded = time.time()  # Ray's run resolved the adapter (the rest of it takes microseconds)
        return replica_timing.stamped(stream, clock)

    # -- the rest of serving.placement.Replica: what placement reads and calls --------------------
    @property
    def resident(self) -> PinnedLRU | None:
        """The replica's resident adapters (None outside a Serve replica: Ray's own LRU then)."""
        return self._lru

    @property
    def base_model_id(self) -> str:
        return self._llm_config.model_id

    @property
    def adapter_path(self) -> str | None:
        """Where the replica downloads adapters from (the store's prefix; None without LoRA)."""
        lora = self._llm_config.lora_config
        return lora.dynamic_lora_loading_path if lora is not None else None

    async def remove_from_engine(self, model_id: str) -> None:
        """Drop an evicted adapter from vLLM's served names and its LoRA cache."""
        try:
            from serving.compat import UnloadLoRAAdapterRequest

            models = served_models(self.engine)
            request = models.lora_requests.get(model_id) if models is not None else None
            if request is None:
                return
            await models.unload_lora_adapter(UnloadLoRAAdapterRequest(lora_name=model_id))
            client = engine_client(self.engine)
            if client is not None:
                await client.remove_lora(request.lora_int_id)
        except Exception:  # noqa: BLE001 - a failed removal leaves it to vLLM's own LRU
            log.warning("could not remove evicted adapter %s from the engine", model_id, exc_info=True)

    async def _install_coverage_check(self) -> None:
        """Have the workers check coverage inside each registration, and refuse to start when the config
        asks for vision-tower LoRA that this engine cannot apply."""
        if self._llm_config.lora_config is None:
            return
        supported = await engine_client(self.engine).collective_rpc("lora_coverage_install")
        if not self._llm_config.engine_kwargs.get("enable_tower_connector_lora"):
            return
        if not all(supported):
            raise RuntimeError(
                f"lora.vision_tower is on, but the engine applies no LoRA to the vision tower of base model "
                f"{self.base_model_id!r} (vLLM supports it per architecture, and not with a language-model-only "
                "engine): turn lora.vision_tower off and publish adapters without tower modules")

    async def _ask_coverage(self, model_id: str) -> dict:
        """The engine's coverage report of a registered adapter through the ``lora_coverage`` RPC (where
        the worker left none at registration)."""
        request = served_models(self.engine).lora_requests.get(model_id)
        reports = await engine_client(self.engine).collective_rpc("lora_coverage", args=(request.lora_int_id,))
        return reports[0]

    async def ensure_resident(self, model_id: str) -> None:
        """Load ``model_id`` (download, verify, register with the engine) unless it is resident."""
        self._raise_if_refused(model_id)
        disk_lora_model = await self._load_model(model_id)
        await self._register(model_id, disk_lora_model)

    async def _maybe_resolve_lora_from_multiplex(self) -> None:
        model_id = serve.get_multiplexed_model_id()
        if not model_id:
            return
        if self._llm_config.lora_config is None:
            raise ValueError("Must setup lora config for multiplexed requests.")
        self._raise_if_refused(model_id)
        disk_lora_model = await self._load_model(model_id)
        await self._register(model_id, disk_lora_model)

    def _raise_if_refused(self, model_id: str) -> None:
        if model_id in self._refused:
            raise self._refused[model_id]

    async def _register(self, model_id: str, disk_lora_model) -> None:
        self._raise_if_refused(model_id)
        task = self._lora_registrations.get(model_id)
        if task is None:
            if model_id in served_models(self.engine).lora_requests:
                return  # registered and checked by an earlier request (a refused one was removed): every
                # request of a resident adapter passes here, so it costs nothing
            task = asyncio.ensure_future(self._register_whole(model_id, disk_lora_model))
            self._lora_registrations[model_id] = task
            task.add_done_callback(lambda _: self._lora_registrations.pop(model_id, None))
        await asyncio.shield(task)

    async def _register_whole(self, model_id: str, disk_lora_model) -> None:
        """Register the adapter with vLLM, then keep it only if the engine applies all its trained modules."""
        adapter = ModelId.parse(model_id)
        folder, lora_id = disk_lora_model.local_path, adapter.adapter_part
        take_report(folder)  # one left by an earlier registration is not this one's
        start = time.perf_counter()
        await self.engine.resolve_lora(disk_lora_model)
        registered = time.perf_counter()
        try:
            report = take_report(folder) or await self._ask_coverage(model_id)
            in_worker = float(report.pop("coverage_s", 0.0))
            problem = refusal(report, lora_id, lambda: module_count(folder))
        except Exception as exc:  # noqa: BLE001 - not knowing what was applied is not serving it
            log.warning("could not ask the engine what it applied of %s", model_id, exc_info=True)
            problem, in_worker = f"the engine could not report which modules of adapter {lora_id!r} it applied ({exc})", 0.0
        # Where a cold load's time goes, the checks next to the rest (benchmarks/load_checks.py reads it):
        # the worker's check ran inside the registration, so its seconds move from there to coverage.
        tags = metric_tags(adapter)
        times = {**LOAD_SECONDS.pop(lora_id, {}), "register": registered - start - in_worker,
                 "coverage": time.perf_counter() - registered + in_worker}
        for phase, seconds in times.items():
            metric("load_seconds").inc(seconds, tags={**tags, "phase": phase})
        if problem is None:
            return
        metric("refusals").inc(tags={**tags, "reason": "not_applied"})
        log.error("refused %s: %s", model_id, problem)
        self._refused[model_id] = AdapterNotApplied(problem)
        await self.remove_from_engine(model_id)
        if self._lru is not None:
            self._lru.models.pop(model_id, None)
            self._lru.last_used.pop(model_id, None)
            self.placement_changed()
        raise self._refused[model_id]
