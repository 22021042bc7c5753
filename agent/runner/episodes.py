"""The async episode runner: drives a maze episode turn by turn against a policy.

``run_episodes_async`` is the one implementation; ``run_episode(s)`` are ``asyncio.run`` shells.
An endpoint failure that outlives the retry policy ends the episode with ``stop_reason=error``:
it is never scored as solved or failed. An endpoint that is briefly gone (a replica restarting) or
rate-limiting is waited out (agent.runner.outage) rather than counted in attempts.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from agent.env import ENV_SPEC_VERSION, MazeEnv, positions, read_env, register_envs
from agent.errors import PolicyError, RetryBudgetExhausted
from agent.maze import feedback_code, grid_to_rows, shortest_path
from agent.protocol import assistant_message, get_protocol, user_message
from agent.runner.config import EndpointConfig, RunnerConfig
from agent.runner.outage import EndpointWaits, wait_kind
from agent.runner.policies import EPISODE_SESSION, OpenAIPolicy, Policy, PolicyReply, as_policy
from agent.runner.records import EpisodeRecord, StopReason, TurnRecord

log = logging.getLogger(__name__)

PARSE_FAILURE = "PARSE_FAILURE"


@dataclass(frozen=True)
class EpisodeSpec:
    """Which maze to play: a seed, or an explicit initial state via ``options``."""

    seed: int | None = None
    sample: int = 0
    options: dict[str, Any] | None = None


@dataclass
class _RetryState:
    """Retries spent in one episode (the budget is per episode, across turns)."""

    budget: int
    used: int = 0
    turn_used: int = field(default=0)


def _make_env(env_id: str) -> gym.Env:
    """The bare env of ``env_id``: this project's, or VisGym's own when VisGym registered the id.

    The runner owns the turn limit (parse failures count as turns without stepping the env) and
    talks to the env only through VisGym's API (string actions, info keys), so both work.
    """
    register_envs()
    return gym.make(env_id, disable_env_checker=True).unwrapped


def _reset(env: gym.Env, spec: EpisodeSpec):
    if spec.options is None or isinstance(env, MazeEnv):
        return env.reset(seed=spec.seed, options=spec.options)
    # A VisGym env takes an explicit state only as init_state.
    opts = spec.options
    state = {"maze_map": opts["maze"], "agent_location": list(opts["agent"]), "target_location": list(opts["goal"])}
    if isinstance(opts["maze"][0], str):
        state["maze_map"] = [[1 if ch == "#" else 0 for ch in row] for row in opts["maze"]]
    return env.reset(seed=spec.seed, init_state=state)


async def _wait_out(policy: Policy, kind: str, wait: float, deadline: float) -> None:
    """Wait before resending a request the endpoint could not take: until its readiness probe says
    ready (an unavailable endpoint that has one), else the backoff or the server's Retry-After."""
    remaining = max(0.0, deadline - time.monotonic())
    probe = getattr(policy, "wait_ready", None)
    if kind == "unavailable" and probe is not None:
        ready = await probe(remaining)
        if ready is not None:
            if ready:
                await asyncio.sleep(min(wait, 0.5))  # ready again: resend soon, not all at once
            return
    await asyncio.sleep(min(wait, remaining))


async def _call_with_retries(policy: Policy, messages, cfg: RunnerConfig, state: _RetryState,
                             waits: EndpointWaits) -> PolicyReply:
    retry = cfg.retry
    delay = retry.backoff_initial_s
    attempt, deadline = 0, None  # deadline: set once the request starts waiting for its endpoint
    try:
        while True:
            try:
                return await policy(messages, cfg.sampling)
            except PolicyError as exc:
                if not exc.transient:
                    raise
                kind = wait_kind(exc) if retry.wait_budget_s > 0 else None
                wait = delay * (0.5 + random.random())  # jitter spreads concurrent retries
                if exc.retry_after_s is not None:
                    wait = min(max(wait, exc.retry_after_s), retry.retry_after_cap_s)
                delay = min(delay * 2, retry.backoff_max_s)
                state.turn_used += 1
                if kind is None:  # counted in attempts and in the episode's budget
                    attempt += 1
                    if attempt >= retry.max_attempts or state.used >= state.budget:
                        raise RetryBudgetExhausted(f"gave up after {attempt} attempt(s): {exc}") from exc
                    state.used += 1
                    log.debug("transient failure (%s); retry %d in %.2fs", exc, attempt, wait)
                    await asyncio.sleep(wait)
                    continue
                if deadline is None:
                    deadline = time.monotonic() + retry.wait_budget_s
                    waits.begin()
                if time.monotonic() >= deadline:
                    raise RetryBudgetExhausted(
                        f"endpoint still unavailable after {retry.wait_budget_s:.0f}s: {exc}") from exc
                waits.note(kind)
                log.debug("endpoint %s (%s); waiting", kind, exc)
                await _wait_out(policy, kind, wait, deadline)
    finally:
        if deadline is not None:
            waits.end()


async def run_episode_async(policy: Policy | Callable[..., Any], spec: EpisodeSpec, cfg: RunnerConfig,
                            waits: EndpointWaits | None = None) -> EpisodeRecord:
    """Play one episode and return its record (``waits``: the run's shared :class:`EndpointWaits`)."""
    waits = waits if waits is not None else EndpointWaits()
    policy = as_policy(policy)
    # One session key per episode: a gateway splitting a name between versions keeps the episode on one.
    session = uuid.uuid4().hex
    EPISODE_SESSION.set(session)
    proto = get_protocol(cfg.protocol)
    env = _make_env(cfg.env_id)
    frame, info = _reset(env, spec)
    grid, start, goal = positions(info)
    agent = list(start)
    path = shortest_path(grid, start, goal)
    conversation = [user_message(proto.initial_text(*read_env(env)), frame)]
    record = EpisodeRecord(
        env_id=cfg.env_id,
        env_spec_version=ENV_SPEC_VERSION,
        seed=spec.seed,
        sample=spec.sample,
        model=policy.label,
        protocol=proto.id,
        history=str(cfg.history),
        sampling=cfg.sampling.model_dump(exclude_none=True),
        max_turns=cfg.turn_limit,
        maze=grid_to_rows(grid),
        start=list(start),
        goal=list(goal),
        optimal_moves=None if path is None else len(path),
        stop_reason=StopReason.TURN_LIMIT,
    )
    retries = _RetryState(budget=cfg.retry.episode_budget)
    t_start = time.perf_counter()
    for index in range(1, cfg.turn_limit + 1):
        retries.turn_used = 0
        t0 = time.perf_counter()
        try:
            reply = await _call_with_retries(policy, cfg.history.select(conversation), cfg, retries, waits)
        except PolicyError as exc:
            record.stop_reason, record.error = StopReason.ERROR, str(exc)
            break
        latency = time.perf_counter() - t0
        if reply.model and reply.model.startswith(f"{record.model}@"):
            record.model = reply.model  # the gateway names the version that served (a canary's, say)
        conversation.append(assistant_message(reply.text))
        action = proto.parse(reply.text)
        turn = {
            "index": index,
            "reply": reply.text,
            "latency_s": latency,
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "retries": retries.turn_used,
        }
        if action is None:
            # The env is not stepped, but the turn counts.
            text = proto.parse_failure_text()
            record.turns.append(TurnRecord(action=None, feedback=text, feedback_code=PARSE_FAILURE, agent=agent, **turn))
            conversation.append(user_message(text, frame))
            continue
        # A VisGym env takes only text; this env also takes the tuple (which keeps payloads such
        # as inf, whose repr is not a literal, reported as out of the action space).
        frame, reward, terminated, _, info = env.step(tuple(action) if isinstance(env, MazeEnv) else repr(tuple(action)))
        agent = [int(v) for v in info["agent"]]
        feedback = str(info.get("feedback") or info.get("env_feedback") or "")
        record.turns.append(
            TurnRecord(action=list(action), feedback=feedback, feedback_code=feedback_code(info),
                       reward=float(reward), agent=agent, **turn)
        )
        record.reward += float(reward)
        if terminated:
            record.success = reward >= 1.0
            record.stop_reason = StopReason.GOAL if record.success else StopReason.WRONG_STOP
            break
        conversation.append(user_message(feedback, frame))
    record.wall_time_s = time.perf_counter() - t_start
    await _report_outcome(policy, session, record)
    return record


async def _report_outcome(policy: Policy, session: str, record: EpisodeRecord) -> None:
    """Tell a gateway that named the version it served how the episode ended (its live guard judges a
    canary on them). Only where it named one: a plain OpenAI-compatible server is never sent a report.
    A report that fails costs the episode nothing."""
    if not isinstance(policy, OpenAIPolicy) or not policy.endpoint.report_outcomes:
        return
    if not record.model.startswith(f"{policy.label}@"):
        return
    try:
        await policy.report_outcome(session, record)
    except Exception as exc:  # noqa: BLE001 - any failure: the episode's record stands as it is
        log.debug("the outcome of %s's session was not reported: %s", record.model, exc)


async def run_episodes_async(
    policy: Policy | Callable[..., Any],
    specs: Sequence[EpisodeSpec | int],
    cfg: RunnerConfig | None = None,
    *,
    on_done: Callable[[EpisodeRecord], Any] | None = None,
    waits: EndpointWaits | None = None,
) -> list[EpisodeRecord]:
    """Play many episodes concurrently (at most ``cfg.concurrency`` at once).

    Args:
        policy: a :class:`Policy` or a plain ``f(messages) -> str`` callable.
        specs: episode specs, or plain seeds.
        cfg: runner config (defaults: maze_2d/simple, tuple protocol, full history, greedy).
        on_done: called with each record as it finishes (progress bars, stores); may be async.
        waits: shared by the episodes: whether the run waits for its endpoint now, and for how long
            in all (progress lines and reports read it).

    Returns:
        The records, in the order of ``specs``.
    """
    cfg = cfg or RunnerConfig()
    policy = as_policy(policy)
    sem = asyncio.Semaphore(cfg.concurrency)
    waits = waits if waits is not None else EndpointWaits()
    specs = [s if isinstance(s, EpisodeSpec) else EpisodeSpec(seed=int(s)) for s in specs]

    async def one(spec: EpisodeSpec) -> EpisodeRecord:
        async with sem:
            rec = await run_episode_async(policy, spec, cfg, waits)
        if on_done is not None:
            result = on_done(rec)
            if inspect.isawaitable(result):  # e.g. a store write run in a thread
                await result
        return rec

    return list(await asyncio.gather(*(one(s) for s in specs)))


def run_episodes(policy, specs, cfg: RunnerConfig | None = None, **kwargs) -> list[EpisodeRecord]:
    """Synchronous shell over :func:`run_episodes_async`."""
    return asyncio.run(run_episodes_async(policy, specs, cfg, **kwargs))


def run_episode(policy, spec: EpisodeSpec | int, cfg: RunnerConfig | None = None) -> EpisodeRecord:
    """Synchronous shell: play one episode."""
    return run_episodes(policy, [spec], cfg)[0]


async def run_endpoint_async(endpoint: EndpointConfig, specs: Sequence[EpisodeSpec | int], cfg: RunnerConfig | None = None, **kwargs) -> list[EpisodeRecord]:
    """Play episodes against an OpenAI-compatible endpoint, closing the client afterwards."""
    policy = OpenAIPolicy(endpoint)
    try:
        return await run_episodes_async(policy, specs, cfg, **kwargs)
    finally:
        await policy.aclose()
