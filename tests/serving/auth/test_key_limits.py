"""Per-key limits: the sliding window in process (a fake clock) and in a real Redis server (real
time, short windows), two limiters sharing one Redis, and what an outage does (open, closed)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from serving.auth.key_limits import DEFAULT_EPISODES, LocalLimiter, RedisLimiter, duration_text, episode_cap
from serving.config import AuthSpec, KeyLimitsSpec, RateStoreSpec
from serving.errors import LimitStoreUnavailable
from tests.support.redis_server import RedisServer, available


class Clock:
    def __init__(self) -> None:
        self.t = 500.0

    def __call__(self) -> float:
        return self.t


def run(coro):
    return asyncio.run(coro)


def admit(limiter, limits, key="k"):
    return run(limiter.admit(key, limits, uuid.uuid4().hex))


def headers(decision) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in decision.headers()}


def test_requests_sliding_window_counts_down_and_says_when():
    clock = Clock()
    lim, limits = LocalLimiter(60, 900, clock), KeyLimitsSpec(requests=5)
    seen = []
    for _ in range(5):
        d = admit(lim, limits)
        seen.append(int(headers(d)["x-ratelimit-remaining-requests"]))
        clock.t += 1
    assert seen == [4, 3, 2, 1, 0]
    refused = admit(lim, limits)
    h = headers(refused)
    assert not refused.admitted and refused.refused == "requests"
    assert refused.retry_after_s == pytest.approx(55) and h["retry-after"] == "55"
    assert h["x-ratelimit-limit-requests"] == "5" and h["x-ratelimit-remaining-requests"] == "0"
    assert h["x-ratelimit-reset-requests"] == "59s"  # until the newest start leaves the window
    assert "x-ratelimit-limit-tokens" not in h  # no token limit: no token headers
    clock.t = 500 + 60  # the first start leaves the window: exactly one slot again
    assert admit(lim, limits).admitted and not admit(lim, limits).admitted
    assert "per min: limit 5" in refused.message("team-a", 60)


def test_any_window_holds_at_most_the_limit():
    """Driven at 5x the limit for three windows: never more than the limit in any window's span."""
    clock = Clock()
    lim, limits = LocalLimiter(60, 900, clock), KeyLimitsSpec(requests=10, window_s=10)  # the key's own window
    admitted = []
    for i in range(150):  # 5 per second for 30 s
        clock.t = 500 + i * 0.2
        if admit(lim, limits).admitted:
            admitted.append(clock.t)
    assert len(admitted) == 30
    assert max(sum(1 for t in admitted if s <= t < s + 10) for s in admitted) == 10


def test_tokens_are_charged_after_the_response():
    clock = Clock()
    lim, limits = LocalLimiter(60, 900, clock), KeyLimitsSpec(tokens=100)
    first = admit(lim, limits)
    assert first.admitted and headers(first)["x-ratelimit-remaining-tokens"] == "100"
    run(lim.finish("k", limits, "r1", 70))
    clock.t += 10
    run(lim.finish("k", limits, "r2", 40))
    d = admit(lim, limits)
    assert not d.admitted and d.refused == "tokens"
    assert d.retry_after_s == pytest.approx(50)  # the first 70 must leave for 40 < 100
    assert headers(d)["x-ratelimit-remaining-tokens"] == "0"
    clock.t += 50
    d = admit(lim, limits)
    assert d.admitted and headers(d)["x-ratelimit-remaining-tokens"] == "60"


def test_concurrency_and_leases():
    clock = Clock()
    lim, limits = LocalLimiter(60, 100, clock), KeyLimitsSpec(concurrent=2)
    assert run(lim.admit("k", limits, "a")).admitted and run(lim.admit("k", limits, "b")).admitted
    third = run(lim.admit("k", limits, "c"))
    assert not third.admitted and third.refused == "concurrent" and headers(third)["retry-after"] == "1"
    run(lim.finish("k", limits, "a", 0))
    assert run(lim.admit("k", limits, "c")).admitted
    clock.t += 101  # b and c never finished (a replica died): their leases end
    assert run(lim.admit("k", limits, "d")).admitted and run(lim.admit("k", limits, "e")).admitted
    assert run(lim.admit("other", limits, "x")).admitted  # keys are counted apart


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (0.25, "250ms"), (1.5, "1.5s"), (59.9994, "59.999s"),
                                                (360, "6m0s"), (61.4, "1m1s")])
def test_reset_durations_in_openai_form(seconds, text):
    assert duration_text(seconds) == text


# -- Redis ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    if not available():
        pytest.skip("redis-server is not installed (scripts/install_system_deps.sh installs Debian's)")
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


# A store call that should succeed gets a long timeout: the tests share 2 cores with vLLM engines, and
# a busy event loop or a starved redis-server must not turn a live store into a "down" one.
STORE_TIMEOUT_S = 5.0


def spec(window_s: float, on_error: str = "open", prefix: str | None = None) -> AuthSpec:
    return AuthSpec(api_keys_env="UNUSED", limit_window_s=window_s, concurrency_lease_s=30,
                    store=RateStoreSpec(kind="redis", url_env="TEST_REDIS_URL", on_error=on_error,
                                        timeout_s=STORE_TIMEOUT_S, retry_after_error_s=1,
                                        prefix=prefix or f"t{uuid.uuid4().hex[:6]}:"))


async def _drive(limiters, limits, n, key="k"):
    return [await limiters[i % len(limiters)].admit(key, limits, uuid.uuid4().hex) for i in range(n)]


def test_redis_two_replicas_share_one_limit(redis_server, monkeypatch):
    monkeypatch.setenv("TEST_REDIS_URL", redis_server.url)
    s = spec(60.0)  # long enough that the 25 calls always fall in one window
    limits = KeyLimitsSpec(requests=10, tokens=1000, concurrent=50)
    brief = KeyLimitsSpec(requests=1, window_s=1.5)

    async def scenario():
        one, two = RedisLimiter(s), RedisLimiter(s)  # two ingress replicas
        decisions = await _drive([one, two], limits, 25)
        admitted = [d for d in decisions if d.admitted]
        assert len(admitted) == 10 and not any(d.local for d in decisions)
        assert sorted(d.remaining_requests for d in admitted) == list(range(10))
        assert decisions[-1].refused == "requests" and 0 < decisions[-1].retry_after_s <= 60
        # Retry-After is when the window lets the key in again, on either replica.
        for i in range(20):  # the first refusal; bounded, as a stalled call may see the window slide
            refused = await (one, two)[i % 2].admit("b", brief, f"b{i}")
            if not refused.admitted:
                break
        assert refused.refused == "requests" and 0 < refused.retry_after_s <= 1.5
        await asyncio.sleep(refused.retry_after_s + 0.05)
        assert (await one.admit("b", brief, "late")).admitted
        # tokens charged through one replica refuse on the other
        for i in range(2):
            await one.finish("t", limits, f"r{i}", 600)
        d = await two.admit("t", limits, "x")
        assert not d.admitted and d.refused == "tokens" and d.remaining_tokens == 0
        return True

    assert run(scenario())


def test_redis_concurrency_across_replicas(redis_server, monkeypatch):
    monkeypatch.setenv("TEST_REDIS_URL", redis_server.url)
    s, limits = spec(60.0), KeyLimitsSpec(concurrent=2)

    async def scenario():
        one, two = RedisLimiter(s), RedisLimiter(s)
        assert (await one.admit("c", limits, "a")).admitted and (await two.admit("c", limits, "b")).admitted
        d = await one.admit("c", limits, "c")
        assert not d.admitted and d.refused == "concurrent"
        await two.finish("c", limits, "b", 0)  # ended on the other replica: the slot is free for both
        assert (await one.admit("c", limits, "c")).admitted

    run(scenario())


def test_redis_down_fails_open_to_this_replica_or_closed(tmp_path, monkeypatch):
    if not available():
        pytest.skip("redis-server is not installed")
    server = RedisServer(tmp_path).start()
    monkeypatch.setenv("TEST_REDIS_URL", server.url)
    limits = KeyLimitsSpec(requests=3)
    try:
        async def scenario():
            open_, closed = RedisLimiter(spec(60, "open")), RedisLimiter(spec(60, "closed"))
            assert (await open_.admit("k", limits, "a")).admitted and not (await open_.admit("k", limits, "b")).local
            server.stop()
            t0 = time.monotonic()
            d = await open_.admit("k", limits, "c")
            assert d.admitted and d.local and time.monotonic() - t0 < STORE_TIMEOUT_S + 1  # bounded by the timeout
            assert [(await open_.admit("k", limits, x)).admitted for x in "def"] == [True, True, False]  # local limit
            with pytest.raises(LimitStoreUnavailable):
                await closed.admit("k", limits, "z")
            server.start()
            await asyncio.sleep(1.1)  # retry_after_error_s: the store is tried again
            d = await open_.admit("k2", limits, "g")
            assert d.admitted and not d.local
            assert (await closed.admit("k2", limits, "h")).admitted

        run(scenario())
    finally:
        server.stop()


# -- server-side episodes ---------------------------------------------------------------------------
@pytest.mark.parametrize(("limits", "cap"), [({"episodes": 3, "concurrent": 9}, 3), ({"concurrent": 2}, None),
                                             ({"requests": 5}, DEFAULT_EPISODES), ({"tokens": 50}, DEFAULT_EPISODES),
                                             ({}, None)])
def test_episode_cap_is_its_own_or_the_concurrency_or_a_default(limits, cap):
    assert episode_cap(KeyLimitsSpec(**limits)) == cap


def test_an_episode_holds_a_slot_and_its_calls_run_within_it():
    clock = Clock()
    lim, limits = LocalLimiter(60, 900, clock), KeyLimitsSpec(concurrent=2, requests=10)
    episode = run(lim.admit("k", limits, "e1", episode=True))
    assert episode.admitted and headers(episode)["x-ratelimit-remaining-requests"] == "10"  # no request counted
    calls = [run(lim.admit("k", limits, f"c{i}", within="e1")) for i in range(3)]  # its calls: no slot of their own
    assert all(c.admitted for c in calls) and calls[-1].remaining_requests == 7
    assert run(lim.admit("k", limits, "r1")).admitted  # the second slot
    refused = run(lim.admit("k", limits, "e2", episode=True))
    assert not refused.admitted and refused.refused == "concurrent" and headers(refused)["retry-after"] == "1"
    assert not run(lim.admit("k", limits, "r2")).admitted  # the episode's slot counts for plain requests too
    run(lim.finish("k", limits, "e1", 0))
    assert run(lim.admit("k", limits, "e2", episode=True)).admitted


def test_episodes_over_the_cap_are_refused_and_their_calls_meet_the_request_limit():
    clock = Clock()
    lim, limits = LocalLimiter(60, 900, clock), KeyLimitsSpec(requests=2)  # the default cap: 8 episodes
    assert all(run(lim.admit("k", limits, f"e{i}", episode=True)).admitted for i in range(DEFAULT_EPISODES))
    refused = run(lim.admit("k", limits, "e9", episode=True))
    assert not refused.admitted and refused.refused == "episodes"
    assert refused.message("team-a", 60) == ("Rate limit reached for key 'team-a' on server-side episodes: limit 8. "
                                             "Please try again in 1s.")
    assert [run(lim.admit("k", limits, f"c{i}", within="e0")).admitted for i in range(3)] == [True, True, False]
    run(lim.finish("k", limits, "e0", 0))
    assert run(lim.admit("k", limits, "e9", episode=True)).admitted


def test_an_episode_keeps_its_slot_past_the_lease_while_it_calls():
    clock = Clock()
    lim, limits = LocalLimiter(60, 100, clock), KeyLimitsSpec(concurrent=1)
    assert run(lim.admit("k", limits, "e1", episode=True)).admitted
    for _ in range(3):  # a call every 90 s: each renews the 100 s lease
        clock.t += 90
        assert run(lim.admit("k", limits, uuid.uuid4().hex, within="e1")).admitted
        assert not run(lim.admit("k", limits, "other")).admitted
    clock.t += 101  # no call for longer than the lease (its replica died): the slot is free
    assert run(lim.admit("k", limits, "other")).admitted


def test_redis_episodes_hold_slots_across_replicas(redis_server, monkeypatch):
    monkeypatch.setenv("TEST_REDIS_URL", redis_server.url)
    s, limits = spec(60.0), KeyLimitsSpec(concurrent=2, episodes=1, requests=50)

    async def scenario():
        one, two = RedisLimiter(s), RedisLimiter(s)
        assert (await one.admit("e", limits, "e1", episode=True)).admitted
        refused = await two.admit("e", limits, "e2", episode=True)
        assert not refused.admitted and refused.refused == "episodes" and refused.retry_after_s == 1.0
        call = await two.admit("e", limits, "c1", within="e1")  # its calls, on any replica: no slot taken
        assert call.admitted and call.remaining_requests == 49
        assert (await one.admit("e", limits, "r1")).admitted  # the second slot
        assert (await two.admit("e", limits, "r2")).refused == "concurrent"
        await two.finish("e", limits, "e1", 0)
        assert (await one.admit("e", limits, "e2", episode=True)).admitted

    run(scenario())


# -- Redis outages ------------------------------------------------------------------------------------
def count_calls(limiter) -> list:
    """The Redis calls ``limiter`` (and the usage counters on it) make: each borrows a pool connection."""
    calls, pool = [], limiter.client().connection_pool
    get = pool.get_connection

    async def counted(*args, **kwargs):
        calls.append(1)
        return await get(*args, **kwargs)

    pool.get_connection = counted
    return calls


def test_redis_down_usage_reads_refuse_and_writes_share_the_back_off(tmp_path, monkeypatch):
    """While Redis is known down nothing calls it: admissions decide here, usage is kept here, a usage
    read is refused (503: a total without Redis would miss the other replicas'); it recovers alone."""
    if not available():
        pytest.skip("redis-server is not installed")
    from serving.auth.usage import RedisUsage

    server = RedisServer(tmp_path).start()
    monkeypatch.setenv("TEST_REDIS_URL", server.url)
    s, limits = spec(60, "open"), KeyLimitsSpec(requests=100)
    try:
        async def scenario():
            limiter = RedisLimiter(s)
            usage, calls = RedisUsage(s, limiter), count_calls(limiter)
            await usage.add("k", "m", {"requests": 1})
            assert (await usage.totals(60))[0]["requests"] == 1 and len(calls) == 2
            await limiter.client().save()  # the restarted server comes back with this count
            server.stop()
            await usage.add("k", "m", {"requests": 1})  # fails once: the back-off starts for every part
            assert len(calls) == 4 and 0 < limiter.down_for_s() <= 1
            for i in range(5):
                d = await limiter.admit("k", limits, f"r{i}")
                assert d.admitted and d.local
                await limiter.finish("k", limits, f"r{i}", 0, d)
                await usage.add("k", "m", {"requests": 1})
                with pytest.raises(LimitStoreUnavailable, match="cannot be reached; try again shortly"):
                    await usage.totals(60)
            assert len(calls) == 4  # 20 reads and writes while known down: no call
            server.start()
            await asyncio.sleep(limiter.down_for_s() + 0.05)
            rows = await usage.totals(60)  # back by itself: Redis's count plus what this replica kept
            assert rows == [{"key": "k", "model": "m", "requests": 7, "errors": 0, "prompt_tokens": 0,
                             "completion_tokens": 0}]
            assert not (await limiter.admit("k", limits, "x")).local

        run(scenario())
    finally:
        server.stop()


def test_redis_ends_missed_while_down_are_sent_when_it_returns(tmp_path, monkeypatch):
    """A request Redis admitted that ends while it is down frees its slot and charges its tokens
    once Redis answers again, without a call while it is known down."""
    if not available():
        pytest.skip("redis-server is not installed")
    server = RedisServer(tmp_path).start()
    monkeypatch.setenv("TEST_REDIS_URL", server.url)
    s, limits = spec(60, "open"), KeyLimitsSpec(concurrent=1, tokens=100)
    try:
        async def scenario():
            limiter = RedisLimiter(s)
            calls = count_calls(limiter)
            held = await limiter.admit("k", limits, "held")
            assert held.admitted and not held.local
            await limiter.client().save()  # the restarted server comes back with its counters (the slot)
            server.stop()
            assert (await limiter.admit("k", limits, "probe")).local  # the failed call starts the back-off
            n = len(calls)
            await limiter.finish("k", limits, "held", 70, held)  # known down: kept, not sent
            assert len(calls) == n
            server.start()
            await asyncio.sleep(limiter.down_for_s() + 0.05)
            d = await limiter.admit("k", limits, "next")  # the kept end is sent after this decision
            assert not d.local and not d.admitted and d.refused == "concurrent"
            d = await limiter.admit("k", limits, "next")
            assert d.admitted and d.remaining_tokens == 30  # the slot freed, its 70 tokens charged

        run(scenario())
    finally:
        server.stop()
