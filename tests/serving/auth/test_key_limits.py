"""Per-key limits: the sliding window in process (a fake clock) and in a real Redis server (real
time, short windows), two limiters sharing one Redis, and what an outage does (open, closed)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from serving.auth.key_limits import LocalLimiter, RedisLimiter, duration_text
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


def spec(window_s: float, on_error: str = "open", prefix: str | None = None) -> AuthSpec:
    return AuthSpec(api_keys_env="UNUSED", limit_window_s=window_s, concurrency_lease_s=30,
                    store=RateStoreSpec(kind="redis", url_env="TEST_REDIS_URL", on_error=on_error,
                                        retry_after_error_s=1, prefix=prefix or f"t{uuid.uuid4().hex[:6]}:"))


async def _drive(limiters, limits, n, key="k"):
    return [await limiters[i % len(limiters)].admit(key, limits, uuid.uuid4().hex) for i in range(n)]


def test_redis_two_replicas_share_one_limit(redis_server, monkeypatch):
    monkeypatch.setenv("TEST_REDIS_URL", redis_server.url)
    s = spec(2.0)
    limits = KeyLimitsSpec(requests=10, tokens=1000, concurrent=50)

    async def scenario():
        one, two = RedisLimiter(s), RedisLimiter(s)  # two ingress replicas
        decisions = await _drive([one, two], limits, 25)
        admitted = [d for d in decisions if d.admitted]
        assert len(admitted) == 10 and not any(d.local for d in decisions)
        assert sorted(d.remaining_requests for d in admitted) == list(range(10))
        refused = decisions[-1]
        assert refused.refused == "requests" and 0 < refused.retry_after_s <= 2.0
        await asyncio.sleep(refused.retry_after_s + 0.05)
        assert (await one.admit("k", limits, "late")).admitted
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
            assert d.admitted and d.local and time.monotonic() - t0 < 2  # bounded by the store timeout
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
