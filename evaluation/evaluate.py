"""Run an evaluation: the maze set through the runner, every episode into the store, resumable.

``evaluate_async`` is the one implementation; ``evaluate`` is its ``asyncio.run`` shell. A results
database that stops answering mid-run is waited for (:class:`EpisodeWriter`, up to ``DB_WAIT_S``);
past that the run stops with :class:`ResultsDatabaseUnavailable`, and ``--resume`` completes it.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
from pydantic import BaseModel, Field
from sqlalchemy.exc import IntegrityError

from agent.cli import EXIT_UNAVAILABLE
from agent.env import ENV_SPEC_VERSION, get_variant
from agent.protocol import DEFAULT_PROFILE, AgentProfile, get_protocol
from agent.runner import EndpointConfig, EndpointWaits, EpisodeRecord, EpisodeSpec, SamplingParams, run_endpoint_async
from evaluation.config import EvalConfig
from evaluation.errors import EndpointUnavailable, EvalError, UnknownRun  # noqa: F401 - also imported from here
from evaluation.manifest import RunManifest, RunnerSettings
from evaluation.store import Store, is_unavailable
from evaluation.summary import RetryReport, RunSummary, summarize
from serving.adapters import ModelId

log = logging.getLogger(__name__)


class EvalResult(BaseModel):
    """The outcome of :func:`evaluate`."""

    run_id: str = Field(description="run id in the store (use with --resume, report, compare)")
    status: str = Field(description="complete, or incomplete when errored episodes remain")
    manifest: RunManifest = Field(description="what was evaluated")
    summary: RunSummary = Field(description="scores")
    ran: int = Field(description="episodes played by this call (resume plays only the missing ones)")
    retries: RetryReport = Field(default_factory=RetryReport,
                                 description="endpoint failures retried by this call's episodes")
    db_waited_s: float = Field(0.0, description="seconds this call waited for the results database to answer again")
    db_outages: int = Field(0, description="periods in which a store call waited for the results database")


#: Seconds one store call waits for a results database that stopped answering (retrying with back-off)
#: before the run stops; the episodes stored so far stay, and ``--resume`` plays the rest.
DB_WAIT_S = 120.0
DB_BACKOFF_S = (0.5, 4.0)  # first and longest pause between attempts (the longest bounds recovery)


class ResultsDatabaseUnavailable(EvalError):
    """The results database stopped answering mid-run for longer than the run waits: the run stopped."""

    exit_code = EXIT_UNAVAILABLE


class EpisodeWriter:
    """A run's store calls, waiting out a results database that stops answering: bounded retries with
    back-off, counted in shared waits (the progress line shows them). An episode is stored once: a
    write whose commit landed before its answer was lost is not repeated (``(run, seed, sample)`` is
    unique). Once a call gives up, the run stops (``on_stop``) and later episodes are not stored."""

    def __init__(self, store: Store, run_id: str, waits: EndpointWaits, budget_s: float, stored: int = 0):
        self.store, self.run_id, self.waits, self.budget_s = store, run_id, waits, budget_s
        self.stored = stored  # scored episodes of the run in the store
        self.error: ResultsDatabaseUnavailable | None = None
        self.on_stop: Callable[[], Any] = lambda: None

    async def add(self, rec: EpisodeRecord) -> bool:
        """Store ``rec``; False when the run is stopping and it was not stored."""
        if self.error is not None:
            return False
        try:
            await self.call(self.store.add_episode, self.run_id, rec, what=f"seed {rec.seed} sample {rec.sample}")
        except ResultsDatabaseUnavailable as exc:
            if self.error is None:
                self.error = exc
                self.on_stop()
            return False
        self.stored += rec.scored
        return True

    async def call(self, fn: Callable[..., Any], *args: Any, what: str) -> Any:
        """``fn(*args)`` in a thread, retried while the database does not answer, up to ``budget_s``."""
        start, attempt, waiting = time.monotonic(), 0, False
        try:
            while True:
                try:
                    return await asyncio.to_thread(fn, *args)
                except IntegrityError:
                    if attempt == 0:
                        raise
                    return None  # the earlier attempt committed before its connection dropped: stored once
                except Exception as exc:  # noqa: BLE001 - is_unavailable picks the ones worth waiting for
                    if not is_unavailable(exc):
                        raise
                    if not waiting:
                        waiting = True
                        self.waits.begin()
                        log.warning("results database not answering (%s); waiting up to %.0fs", _reason(exc),
                                    self.budget_s)
                    elapsed = time.monotonic() - start
                    if elapsed >= self.budget_s:
                        raise self._gave_up(what, elapsed, exc) from None
                    await asyncio.sleep(min(DB_BACKOFF_S[1], DB_BACKOFF_S[0] * 2 ** attempt, self.budget_s - elapsed))
                    attempt += 1
        finally:
            if waiting:
                self.waits.end()

    def _gave_up(self, what: str, waited_s: float, exc: BaseException) -> ResultsDatabaseUnavailable:
        return ResultsDatabaseUnavailable(
            f"the results database stopped answering ({_reason(exc)}); waited {waited_s:.0f}s to store {what} of "
            f"run {self.run_id}, then stopped the run with {self.stored} episodes stored: once the database is "
            f"back, continue with: maze-eval --resume {self.run_id}")


def _reason(exc: BaseException) -> str:
    """The database driver's own first line (the connection's error), not SQLAlchemy's wrapping."""
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def new_run_id(name: str | None) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    slug = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in (name or "run"))[:40]
    return f"{slug}-{stamp}-{secrets.token_hex(2)}"


def endpoint_client(api_key: str, timeout_s: float) -> httpx.AsyncClient:
    """The HTTP client of a run's requests besides the episodes' (the model list, the version it
    pins): the run's key and its per-request timeout (``EvalConfig.timeout_s``), as the runner's."""
    return httpx.AsyncClient(timeout=timeout_s, headers={"Authorization": f"Bearer {api_key}"})


async def list_models(endpoint: str, api_key: str = "EMPTY", *, client: httpx.AsyncClient | None = None,
                      ) -> list[dict[str, Any]]:
    """The endpoint's ``/v1/models`` entries, following pagination when the server offers it
    (through ``client``, or one of :func:`endpoint_client` with ``api_key`` and the default timeout)."""
    if client is None:
        async with endpoint_client(api_key, EvalConfig.model_fields["timeout_s"].default) as own:
            return await list_models(endpoint, client=own)
    out: list[dict[str, Any]] = []
    params: dict[str, str] = {}
    for _ in range(1000):
        try:
            resp = await client.get(endpoint.rstrip("/") + "/models", params=params)
        except httpx.HTTPError as exc:
            raise EndpointUnavailable(f"cannot reach {endpoint}: {exc}") from exc
        if resp.status_code == 401:
            raise EndpointUnavailable(f"{endpoint} refused the API key (401)")
        if resp.status_code >= 400:
            raise EndpointUnavailable(f"{endpoint}/models answered HTTP {resp.status_code}")
        body = resp.json()
        out += body.get("data", [])
        if not body.get("has_more") or not body.get("data"):
            return out
        params = {"after": body["data"][-1]["id"]}
    return out


async def pinned_version(client: httpx.AsyncClient, endpoint: str, model_id: str, version: str | None) -> str | None:
    """The adapter version a run pins, resolved once at its start through the endpoint's model card
    (``GET /models/{base:name}`` reports the version the alias serves now; ``version`` given:
    checked to exist). None when the endpoint reports no versions (a server other than the gateway)."""
    model = str(ModelId.parse(model_id).at(version or None))
    try:
        resp = await client.get(f"{endpoint.rstrip('/')}/models/{model}")
    except httpx.HTTPError as exc:
        raise EndpointUnavailable(f"cannot reach {endpoint}: {exc}") from exc
    if resp.status_code == 400 and version:  # a malformed version: the caller's input, not the endpoint
        raise EvalError(f"invalid adapter version in {model!r}: {resp.text[:200]}")
    if resp.status_code == 404 and version:
        raise EndpointUnavailable(f"{model!r} is not served at {endpoint}: HTTP {resp.status_code} {resp.text[:200]}")
    if resp.status_code >= 400:
        log.warning("%s/models/%s answered HTTP %d: the run is not pinned to a version", endpoint, model, resp.status_code)
        return None
    reported = resp.json().get("version")
    return version or (reported if isinstance(reported, str) and reported else None)


def _profile_of(models: list[dict[str, Any]], base: str) -> AgentProfile:
    for m in models:
        if m.get("id") == base and isinstance(m.get("agent_profile"), dict):
            return AgentProfile.from_dict(m["agent_profile"])
    return DEFAULT_PROFILE


async def resolve_endpoint(cfg: EvalConfig) -> str:
    """``cfg.endpoint``, or the embedded gateway's URL (started if it is not up)."""
    if cfg.endpoint:
        return cfg.endpoint
    try:
        from serving.local import ensure_embedded_gateway
    except ImportError as exc:
        raise EvalError(
            "no --endpoint given and the embedded gateway is not installed (serving extra); "
            "pass --endpoint http://HOST:PORT/v1"
        ) from exc
    from serving.errors import ServingError

    try:
        return await asyncio.to_thread(ensure_embedded_gateway)
    except ServingError as exc:  # port taken, missing model, stack not ready: the endpoint is unavailable
        raise EndpointUnavailable(f"the embedded gateway could not start: {exc}") from exc


async def _new_manifest(cfg: EvalConfig) -> RunManifest:
    endpoint = await resolve_endpoint(cfg)
    async with endpoint_client(cfg.api_key, cfg.timeout_s) as client:
        models = await list_models(endpoint, client=client)
        ids = [m.get("id") for m in models]
        bases = [i for i in ids if i and ":" not in i]
        base = cfg.base or (bases[0] if bases else None)
        if base is None or base not in ids:
            raise EndpointUnavailable(f"base model {base!r} is not served at {endpoint}; it serves {bases}")
        wanted = ModelId.adapter(cfg.adapter or "", check=False)  # the endpoint checks it (a 400)
        adapter = wanted.name
        model_id = str(wanted.on(base).unversioned) if adapter else base
        if not any(m.get("id") == model_id for m in models):
            known = sorted(served.adapter_part for served in map(ModelId.parse, filter(None, ids))
                           if served.is_adapter and served.base == base)
            raise EndpointUnavailable(f"adapter {adapter!r} is not available for {base!r} at {endpoint}; known: {known}")
        version = await pinned_version(client, endpoint, model_id, wanted.version or None) if adapter else None
    profile = _profile_of(models, base)
    runner = RunnerSettings(
        env_id=cfg.env_id, max_turns=cfg.max_turns or get_variant(cfg.env_id).max_turns,
        protocol=get_protocol(cfg.protocol or profile.protocol).id, history=cfg.history or profile.history,
        sampling=SamplingParams(temperature=cfg.temperature, max_tokens=cfg.max_tokens))
    return RunManifest(
        run_id=new_run_id(cfg.run_name), run_name=cfg.run_name, endpoint=endpoint, base=base, adapter=adapter or None,
        adapter_version=version,  # only a version the run pinned: served_model sends it with every request
        env_spec_version=ENV_SPEC_VERSION, runner=runner, seeds=cfg.seeds, samples=cfg.samples,
    )


async def _open_run(store: Store, cfg: EvalConfig, resume: str | None) -> RunManifest:
    """The manifest of run ``resume`` (marked running again), or of a new run stored now."""
    if not resume:
        manifest = await _new_manifest(cfg)
        await asyncio.to_thread(store.create_run, manifest)
        return manifest
    run = await asyncio.to_thread(store.get_run, resume)
    if run is None:
        raise EvalError(f"no run {resume!r} in {store.url}")
    manifest = RunManifest.model_validate(run["manifest"])
    if cfg.endpoint and cfg.endpoint != manifest.endpoint:
        manifest = manifest.model_copy(update={"endpoint": cfg.endpoint})
    await asyncio.to_thread(store.set_status, manifest.run_id, "running")
    return manifest


async def _play(cfg: EvalConfig, manifest: RunManifest, todo: list[EpisodeSpec], writer: EpisodeWriter,
                retries: RetryReport, waits: EndpointWaits, on_episode: Callable | None) -> None:
    """Play ``todo`` into the store; stop them all once the writer gives up on the database."""

    async def record(rec: EpisodeRecord) -> None:
        retries.add(rec.turns, not rec.scored)
        if await writer.add(rec) and on_episode is not None:
            on_episode(rec, writer.stored, manifest.expected_episodes)

    # served_model pins the version resolved at the start: a promote meanwhile does not change it.
    endpoint = EndpointConfig(base_url=manifest.endpoint, api_key=cfg.api_key, model=manifest.served_model,
                              timeout_s=cfg.timeout_s)
    runner = manifest.runner.runner_config(retry=cfg.retry, concurrency=cfg.concurrency)
    play = asyncio.ensure_future(run_endpoint_async(endpoint, todo, runner, on_done=record, waits=waits))
    writer.on_stop = play.cancel  # episodes still playing could not be stored: a resume plays them instead
    try:
        await play
    except asyncio.CancelledError:
        if writer.error is None:
            raise
    if writer.error is not None:
        raise writer.error


async def evaluate_async(
    cfg: EvalConfig,
    *,
    resume: str | None = None,
    on_episode: Callable[[EpisodeRecord, int, int], Any] | None = None,
    waits: EndpointWaits | None = None,
    db_waits: EndpointWaits | None = None,
    db_wait_s: float | None = None,
) -> EvalResult:
    """Evaluate one (base, adapter) on the maze set, or resume run ``resume``.

    Args:
        cfg: the evaluation config (on resume only endpoint, api_key, concurrency and retry apply).
        resume: a run id to continue: only its missing and errored episodes are played.
        on_episode: progress callback ``(record, done, total)``, once the record is stored.
        waits: the run's :class:`agent.EndpointWaits` (progress lines read whether it waits now).
        db_waits: the same for the results database (while writes wait for it to answer again).
        db_wait_s: how long one write waits for the database before the run stops (default ``DB_WAIT_S``).

    Raises:
        EvalError: bad input (unknown run, ...). EndpointUnavailable: endpoint or model missing.
        ResultsDatabaseUnavailable: the database stopped answering for longer than ``db_wait_s``
            mid-run (every episode stored so far is kept; ``--resume`` plays the rest).
    """
    store = await asyncio.to_thread(Store, cfg.db)
    try:
        manifest = await _open_run(store, cfg, resume)
        done = await asyncio.to_thread(store.done_keys, manifest.run_id)
        todo = [EpisodeSpec(seed=s, sample=k) for s in manifest.seeds for k in range(manifest.samples) if (s, k) not in done]
        total = manifest.expected_episodes
        log.info("run %s: %d of %d episodes to play on %s", manifest.run_id, len(todo), total, manifest.served_model)
        db_waits = db_waits if db_waits is not None else EndpointWaits()
        writer = EpisodeWriter(store, manifest.run_id, db_waits, DB_WAIT_S if db_wait_s is None else db_wait_s,
                               stored=len(done))
        retries, waits = RetryReport(), waits if waits is not None else EndpointWaits()
        await _play(cfg, manifest, todo, writer, retries, waits, on_episode)
        retries.add_waits(waits)
        rows = await writer.call(store.episode_rows, manifest.run_id, what="the run's episodes")
        summary = summarize(rows, manifest.samples)
        status = "complete" if summary.errors == 0 and summary.n == total else "incomplete"
        await writer.call(store.set_status, manifest.run_id, status, what="the run's status")
        return EvalResult(run_id=manifest.run_id, status=status, manifest=manifest, summary=summary, ran=len(todo),
                          retries=retries, db_waited_s=round(db_waits.waited_s, 2), db_outages=db_waits.outages)
    finally:
        store.close()


def evaluate(cfg: EvalConfig, **kwargs) -> EvalResult:
    """Synchronous shell over :func:`evaluate_async`."""
    return asyncio.run(evaluate_async(cfg, **kwargs))
