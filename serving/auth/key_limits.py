"""Per-key limits: requests and tokens per sliding window, and requests in flight.

Each key's requests and tokens are counted over a sliding window (``auth.limit_window_s``, a
minute by default): a log of when each admitted request started, and of each request's tokens
when its usage was known. A request is admitted while

* fewer than ``limits.requests`` requests started in the window,
* the window's tokens are below ``limits.tokens`` (tokens are charged after the response, from
  its usage: a request is never refused for tokens it has not used yet), and
* fewer than ``limits.concurrent`` requests are in flight.

A server-side episode (``POST /v1/episodes``) is admitted as one: it holds a ``concurrent`` slot
and an episode slot (:func:`episode_cap`) for its whole life, so a key cannot park more episodes
than its limits allow, each waiting out its own 429s. Its model calls come back through the gate
and run *within* it: they meet the request and token limits but take no slot of their own (the
episode's covers them, one call at a time) and renew its lease, so a long episode keeps its slot.

So any window of that length holds at most ``requests`` admitted requests (a fixed window would
allow twice that across its boundary; a token bucket its burst plus the refill). A refusal says
when to come back: ``Retry-After`` is the time until the oldest entry leaves the window (for
tokens, until enough have left to fall below the limit; for concurrency a 1 s hint). Every
response of a limited key carries OpenAI's ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``
headers (reset: until the window is empty again, OpenAI's "resets to its initial state").

Two stores with one interface:

* :class:`LocalLimiter`: in the ingress replica's process (the embedded stack, one replica);
* :class:`RedisLimiter`: a Redis server shared by every ingress replica. Each decision is one Lua
  script (atomic on the server, Redis's clock for every replica, sorted sets per key, expiring
  with the window), so two replicas admit a key's limit, not twice it.

When Redis cannot be reached, ``auth.store.on_error`` decides: ``open`` decides with this
replica's own :class:`LocalLimiter` (limits then hold per replica), ``closed`` refuses with 503.
After a failure the replica skips Redis for ``retry_after_error_s`` (:meth:`RedisLimiter.down_for_s`,
which the usage counters share, so an outage costs one failed call per back-off, not one per
request). The ends of requests Redis admitted are kept meanwhile and sent once it answers again,
so their slots free and their tokens count without waiting for the leases to run out.
"""

from __future__ import annotations

import collections
import logging
import math
import os
import threading
import time
from dataclasses import dataclass, field

from serving.config import AuthSpec, KeyLimitsSpec
from serving.errors import LimitStoreUnavailable
from serving.metrics import metric

log = logging.getLogger(__name__)

CONCURRENCY_RETRY_S = 1.0  # a slot frees when some request ends: no time is known, 1 s is the hint
DEFAULT_EPISODES = 8  # the runner's default concurrency: what one client of /v1/episodes plays at once
# Ends of Redis-admitted requests kept while it is down (those in flight when it went: the others are
# decided in this replica); past that the oldest are left to their leases.
MAX_PENDING_FINISHES = 10_000


def episode_cap(limits: KeyLimitsSpec) -> int | None:
    """How many server-side episodes a key may play at once; None: no cap of their own.

    ``limits.episodes`` when set. Otherwise each episode holds one of the ``concurrent`` slots,
    which bound them already; a key limited only by requests or tokens gets :data:`DEFAULT_EPISODES`
    (else it could park any number of episodes, each waiting out its 429s); a key without limits
    is not metered at all."""
    if limits.episodes:
        return limits.episodes
    if limits.concurrent:
        return None
    return DEFAULT_EPISODES if (limits.requests or limits.tokens) else None


def meters_episodes(limits: KeyLimitsSpec) -> bool:
    """Whether a key's episodes go through the limiter (it has a slot or a cap to take)."""
    return bool(limits.concurrent or episode_cap(limits))


@dataclass(frozen=True)
class Decision:
    """One admission decision and the key's counters at that moment (after it)."""

    admitted: bool
    limits: KeyLimitsSpec
    refused: str | None = None  # requests | tokens | concurrent | episodes
    retry_after_s: float = 0.0
    remaining_requests: int | None = None
    reset_requests_s: float = 0.0
    remaining_tokens: int | None = None
    reset_tokens_s: float = 0.0
    local: bool = True  # decided by the in-process counters (the request finishes there too)

    def headers(self) -> list[tuple[bytes, bytes]]:
        """OpenAI's rate-limit headers (and ``Retry-After`` on a refusal)."""
        out = []
        lim = self.limits
        if lim.requests:
            out += [(b"x-ratelimit-limit-requests", str(lim.requests).encode()),
                    (b"x-ratelimit-remaining-requests", str(self.remaining_requests or 0).encode()),
                    (b"x-ratelimit-reset-requests", duration_text(self.reset_requests_s).encode())]
        if lim.tokens:
            out += [(b"x-ratelimit-limit-tokens", str(lim.tokens).encode()),
                    (b"x-ratelimit-remaining-tokens", str(self.remaining_tokens or 0).encode()),
                    (b"x-ratelimit-reset-tokens", duration_text(self.reset_tokens_s).encode())]
        if not self.admitted:
            out.append((b"retry-after", str(max(1, math.ceil(self.retry_after_s))).encode()))
        return out

    def message(self, key: str, window_s: float) -> str:
        lim, wait = self.limits, max(1, math.ceil(self.retry_after_s))
        if self.refused == "concurrent":
            return (f"Rate limit reached for key {key!r} on concurrent requests: limit {lim.concurrent}. "
                    f"Please try again in {wait}s.")
        if self.refused == "episodes":
            return (f"Rate limit reached for key {key!r} on server-side episodes: limit {episode_cap(lim)}. "
                    f"Please try again in {wait}s.")
        what, limit = ("requests", lim.requests) if self.refused == "requests" else ("tokens", lim.tokens)
        return (f"Rate limit reached for key {key!r} on {what} per {window_text(window_s)}: limit {limit}. "
                f"Please try again in {wait}s.")


def duration_text(seconds: float) -> str:
    """OpenAI's reset format: ``250ms``, ``1.5s``, ``6m0s``."""
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms"
    if seconds < 60:
        return f"{round(seconds, 3):g}s"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{round(rest):d}s"


def window_text(seconds: float) -> str:
    return "min" if seconds == 60 else f"{seconds:g}s"


@dataclass
class _KeyState:
    starts: collections.deque = field(default_factory=collections.deque)  # admitted request start times
    tokens: collections.deque = field(default_factory=collections.deque)  # (time, tokens)
    token_sum: int = 0
    in_flight: dict[str, float] = field(default_factory=dict)  # request id -> start (an episode's: last call)
    episodes: dict[str, float] = field(default_factory=dict)  # episode id -> start or last call


class LocalLimiter:
    """The limits in this process (thread-safe; decisions take microseconds)."""

    def __init__(self, window_s: float, lease_s: float, clock=time.monotonic):
        self.window_s, self.lease_s, self._clock = window_s, lease_s, clock
        self._keys: dict[str, _KeyState] = collections.defaultdict(_KeyState)
        self._lock = threading.Lock()

    async def admit(self, key: str, limits: KeyLimitsSpec, request_id: str, *, episode: bool = False,
                    within: str | None = None) -> Decision:
        return self.admit_now(key, limits, request_id, episode=episode, within=within)

    async def finish(self, key: str, limits: KeyLimitsSpec, request_id: str, tokens: int,
                     decision: Decision | None = None) -> None:
        self.finish_now(key, limits, request_id, tokens)

    def down_for_s(self) -> float:
        """Always 0: counters in this process cannot be out of reach."""
        return 0.0

    def admit_now(self, key: str, limits: KeyLimitsSpec, request_id: str, *, episode: bool = False,
                  within: str | None = None) -> Decision:
        """Admit a model request; with ``episode``, a server-side episode (a ``concurrent`` slot and
        an episode slot, no request counted); with ``within`` an episode's id, one of its calls
        (requests and tokens counted, no slot of its own, the episode's lease renewed)."""
        window = limits.window_s or self.window_s
        slot = within is None
        with self._lock:
            now = self._clock()
            st = self._expire(self._keys[key], now, window)
            if within is not None:
                self._renew(st, within, now)
            refused, retry = self._refusal(st, limits, now, window, episode, slot)
            if refused is None:
                self._take(st, limits, request_id, now, episode, slot)
            return Decision(
                admitted=refused is None, limits=limits, refused=refused, retry_after_s=retry,
                remaining_requests=max(0, limits.requests - len(st.starts)) if limits.requests else None,
                reset_requests_s=(st.starts[-1] + window - now) if st.starts else 0.0,
                remaining_tokens=max(0, limits.tokens - st.token_sum) if limits.tokens else None,
                reset_tokens_s=(st.tokens[-1][0] + window - now) if st.tokens else 0.0)

    def _refusal(self, st: _KeyState, limits: KeyLimitsSpec, now: float, window: float, episode: bool,
                 slot: bool) -> tuple[str | None, float]:
        """The first limit a request would break (None) and when to come back."""
        refused, retry = None, 0.0
        if not episode:  # an episode is no model request: its calls meet these two
            if limits.requests and len(st.starts) >= limits.requests:
                refused, retry = "requests", st.starts[0] + window - now
            if limits.tokens and st.token_sum >= limits.tokens:
                refused = refused or "tokens"
                retry = max(retry, self._tokens_free_at(st, limits.tokens) + window - now)
        cap = episode_cap(limits) if episode else None
        if cap and len(st.episodes) >= cap:
            refused, retry = refused or "episodes", max(retry, CONCURRENCY_RETRY_S)
        if slot and limits.concurrent and len(st.in_flight) >= limits.concurrent:
            refused, retry = refused or "concurrent", max(retry, CONCURRENCY_RETRY_S)
        return refused, retry

    @staticmethod
    def _take(st: _KeyState, limits: KeyLimitsSpec, request_id: str, now: float, episode: bool, slot: bool) -> None:
        if limits.requests and not episode:
            st.starts.append(now)
        if slot and limits.concurrent:
            st.in_flight[request_id] = now
        if episode and episode_cap(limits):
            st.episodes[request_id] = now

    @staticmethod
    def _renew(st: _KeyState, episode_id: str, now: float) -> None:
        # Each call of an episode restarts its lease: an episode longer than the lease keeps its slot.
        for held in (st.in_flight, st.episodes):
            if episode_id in held:
                held[episode_id] = now

    def finish_now(self, key: str, limits: KeyLimitsSpec, request_id: str, tokens: int) -> None:
        with self._lock:
            st = self._keys[key]
            st.in_flight.pop(request_id, None)
            st.episodes.pop(request_id, None)
            if limits.tokens and tokens > 0:
                st.tokens.append((self._clock(), tokens))
                st.token_sum += tokens

    def _expire(self, st: _KeyState, now: float, window: float) -> _KeyState:
        edge = now - window
        while st.starts and st.starts[0] <= edge:
            st.starts.popleft()
        while st.tokens and st.tokens[0][0] <= edge:
            st.token_sum -= st.tokens.popleft()[1]
        for held in (st.in_flight, st.episodes):
            stale = [rid for rid, t in held.items() if t <= now - self.lease_s]
            for rid in stale:
                del held[rid]
        return st

    @staticmethod
    def _tokens_free_at(st: _KeyState, limit: int) -> float:
        """When the oldest entries that must leave for the sum to fall below ``limit`` were charged."""
        left = st.token_sum
        for at, n in st.tokens:
            left -= n
            if left < limit:
                return at
        return st.tokens[-1][0] if st.tokens else 0.0


# KEYS: starts, tokens (zset of "id:n"), token sum, in flight, episodes.
# ARGV: window ms, requests limit, tokens limit, concurrent limit (0: none), request id, lease ms,
# episodes limit (0: none), the episode a call runs within ('': none; its leases are renewed).
_ADMIT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window, lr, lt, lc = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local rid, lease = ARGV[5], tonumber(ARGV[6])
local edge = now - window
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', edge)
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', edge)
if #gone > 0 then
  local drop = 0
  for _, m in ipairs(gone) do drop = drop + tonumber(string.match(m, ':(%d+)$')) end
  redis.call('DECRBY', KEYS[3], drop)
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', edge)
end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - lease)
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now - lease)
local le, within = tonumber(ARGV[7]), ARGV[8]
if within ~= '' then
  redis.call('ZADD', KEYS[4], 'XX', now, within)
  redis.call('ZADD', KEYS[5], 'XX', now, within)
  redis.call('PEXPIRE', KEYS[4], lease)
  redis.call('PEXPIRE', KEYS[5], lease)
end
local starts = redis.call('ZCARD', KEYS[1])
local used = tonumber(redis.call('GET', KEYS[3]) or '0')
local refused, retry = '', 0
if lr > 0 and starts >= lr then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  refused, retry = 'requests', tonumber(first[2]) + window - now
end
if lt > 0 and used >= lt then
  local entries = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
  local left, at = used, now
  for i = 1, #entries, 2 do
    left = left - tonumber(string.match(entries[i], ':(%d+)$'))
    at = tonumber(entries[i + 1])
    if left < lt then break end
  end
  if refused == '' then refused = 'tokens' end
  retry = math.max(retry, at + window - now)
end
if le > 0 and redis.call('ZCARD', KEYS[5]) >= le then
  if refused == '' then refused = 'episodes' end
  retry = math.max(retry, 1000)
end
if lc > 0 and redis.call('ZCARD', KEYS[4]) >= lc then
  if refused == '' then refused = 'concurrent' end
  retry = math.max(retry, 1000)
end
if refused == '' then
  if lr > 0 then
    redis.call('ZADD', KEYS[1], now, rid)
    starts = starts + 1
    redis.call('PEXPIRE', KEYS[1], window)
  end
  if lc > 0 then
    redis.call('ZADD', KEYS[4], now, rid)
    redis.call('PEXPIRE', KEYS[4], lease)
  end
  if le > 0 then
    redis.call('ZADD', KEYS[5], now, rid)
    redis.call('PEXPIRE', KEYS[5], lease)
  end
end
local reset_r, reset_t = 0, 0
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if #last > 0 then reset_r = tonumber(last[2]) + window - now end
last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
if #last > 0 then reset_t = tonumber(last[2]) + window - now end
return {refused, tostring(retry), starts, used, tostring(reset_r), tostring(reset_t)}
"""

# KEYS: tokens, token sum, in flight, episodes. ARGV: request id, tokens, window ms.
_FINISH = """
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
local n = tonumber(ARGV[2])
if n > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZADD', KEYS[1], now, ARGV[1] .. ':' .. n)
  redis.call('INCRBY', KEYS[2], n)
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return 1
"""


def redis_client(spec: AuthSpec):
    """An asyncio Redis client for ``auth.store`` (URL from its env var)."""
    import redis.asyncio as aioredis

    store = spec.store
    url = os.environ.get(store.url_env)
    if not url:
        raise LimitStoreUnavailable(f"auth.store is redis but env var {store.url_env} holds no Redis URL")
    return aioredis.Redis.from_url(url, socket_timeout=store.timeout_s, socket_connect_timeout=store.timeout_s,
                                   health_check_interval=30)


class RedisLimiter:
    """The limits in a Redis server shared by every ingress replica, with ``on_error`` behind it."""

    def __init__(self, spec: AuthSpec, client=None, clock=time.monotonic):
        self.spec, self._clock = spec, clock
        self._client = client
        self.local = LocalLimiter(spec.limit_window_s, spec.concurrency_lease_s, clock)
        self._down_until = float("-inf")
        self._admit = self._finish = None
        self._pending: collections.deque = collections.deque(maxlen=MAX_PENDING_FINISHES)  # (key, finish args)
        self._replaying = False

    def client(self):
        """The Redis client (built on first use, with the scripts registered)."""
        if self._client is None:
            self._client = redis_client(self.spec)
        if self._admit is None:
            self._admit = self._client.register_script(_ADMIT)
            self._finish = self._client.register_script(_FINISH)
        return self._client

    def down_for_s(self) -> float:
        """Seconds before this replica tries Redis again after a failed call (0: not known down).
        The usage counters ask it too, so no part of the gate calls Redis while it is known down."""
        return max(0.0, self._down_until - self._clock())

    def failed(self, action: str, exc: BaseException) -> None:
        """Note a failed store call: every caller skips Redis for ``retry_after_error_s``."""
        self._down_until = self._clock() + self.spec.store.retry_after_error_s
        metric("limit_store_errors").inc(tags={"action": action})
        log.warning("limit store unavailable (%s: %s); %s for %.0fs", action, type(exc).__name__,
                    "deciding in this replica" if self.spec.store.on_error == "open" else "refusing",
                    self.spec.store.retry_after_error_s)

    def _keys(self, key: str) -> list[str]:
        # One hash tag per key: a Redis Cluster keeps all of a key's counters in one slot.
        p = f"{self.spec.store.prefix}limit:{{{key}}}:"
        return [p + "starts", p + "tokens", p + "token_sum", p + "in_flight", p + "episodes"]

    def _fallback(self, key: str, limits: KeyLimitsSpec, request_id: str, episode: bool,
                  within: str | None) -> Decision:
        if self.spec.store.on_error == "closed":
            raise LimitStoreUnavailable("the rate-limit store cannot be reached; try again shortly")
        return self.local.admit_now(key, limits, request_id, episode=episode, within=within)

    def _admit_args(self, limits: KeyLimitsSpec, request_id: str, episode: bool, within: str | None) -> list:
        # An episode takes slots only; a call within one counts requests and tokens, no slot.
        requests, tokens = (0, 0) if episode else (limits.requests or 0, limits.tokens or 0)
        concurrent = 0 if within is not None else limits.concurrent or 0
        return [int((limits.window_s or self.spec.limit_window_s) * 1000), requests, tokens, concurrent, request_id,
                int(self.spec.concurrency_lease_s * 1000), (episode_cap(limits) or 0) if episode else 0,
                within or ""]

    async def admit(self, key: str, limits: KeyLimitsSpec, request_id: str, *, episode: bool = False,
                    within: str | None = None) -> Decision:
        """As :meth:`LocalLimiter.admit_now`, decided by one script on Redis."""
        if self.down_for_s() > 0:
            return self._fallback(key, limits, request_id, episode, within)
        try:
            self.client()
            out = await self._admit(keys=self._keys(key), args=self._admit_args(limits, request_id, episode, within))
        except Exception as exc:  # any store failure is an outage to the gateway
            if isinstance(exc, LimitStoreUnavailable) and self.spec.store.on_error == "closed":
                raise
            self.failed("admit", exc)
            return self._fallback(key, limits, request_id, episode, within)
        if self._pending:
            await self._replay()
        refused, retry_ms, starts, used, reset_r, reset_t = (v.decode() if isinstance(v, bytes) else v for v in out)
        return Decision(
            admitted=not refused, limits=limits, refused=refused or None, retry_after_s=float(retry_ms) / 1000,
            remaining_requests=max(0, limits.requests - int(starts)) if limits.requests else None,
            reset_requests_s=float(reset_r) / 1000,
            remaining_tokens=max(0, limits.tokens - int(used)) if limits.tokens else None,
            reset_tokens_s=float(reset_t) / 1000, local=False)

    async def finish(self, key: str, limits: KeyLimitsSpec, request_id: str, tokens: int,
                     decision: Decision | None = None) -> None:
        if decision is not None and decision.local:
            self.local.finish_now(key, limits, request_id, tokens)
            return
        args = [request_id, tokens if limits.tokens else 0, int((limits.window_s or self.spec.limit_window_s) * 1000)]
        if self.down_for_s() > 0:  # known down: kept for when it answers, no call now
            self._pending.append((key, args))
            return
        try:
            self.client()
            await self._finish(keys=self._keys(key)[1:], args=args)
        except Exception as exc:  # noqa: BLE001 - kept and sent again once Redis answers
            self.failed("finish", exc)
            self._pending.append((key, args))

    async def _replay(self) -> None:
        """Send the ends Redis missed while down, oldest first, now that it answers: their slots
        free and their tokens count (else the slots stay taken until their leases run out)."""
        if self._replaying:  # one replay at a time: a finish sent twice would charge its tokens twice
            return
        self._replaying = True
        try:
            while self._pending:
                key, args = self._pending.popleft()
                try:
                    await self._finish(keys=self._keys(key)[1:], args=args)
                except Exception as exc:  # noqa: BLE001 - still down: kept for the next time
                    self._pending.appendleft((key, args))
                    self.failed("finish", exc)
                    return
        finally:
            self._replaying = False


def make_limiter(spec: AuthSpec):
    """The limiter of an auth config: shared (Redis) or in this process."""
    if spec.store.kind == "redis":
        return RedisLimiter(spec)
    return LocalLimiter(spec.limit_window_s, spec.concurrency_lease_s)


__all__ = ["DEFAULT_EPISODES", "Decision", "LocalLimiter", "RedisLimiter", "duration_text", "episode_cap",
           "make_limiter", "meters_episodes", "redis_client"]
