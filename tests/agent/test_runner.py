"""The episode runner against a real HTTP server on 127.0.0.1 speaking the OpenAI chat API."""

from __future__ import annotations

import asyncio
import time

import pytest

from agent import (
    TUPLE,
    EndpointConfig,
    EndpointWaits,
    EpisodeSpec,
    OpenAIPolicy,
    RetryPolicy,
    RunnerConfig,
    StopReason,
    bfs_policy,
    read_jsonl,
    replay_conversation,
    replay_frames,
    run_endpoint_async,
    run_episodes,
    run_episodes_async,
    write_jsonl,
)
from agent.env import MazeEnv

FAST_RETRY = RetryPolicy(max_attempts=4, backoff_initial_s=0.01, backoff_max_s=0.05, episode_budget=100)


def endpoint(scripted, model="bfs", timeout_s=10.0) -> EndpointConfig:
    return EndpointConfig(base_url=scripted.url, model=model, timeout_s=timeout_s)


async def test_solved_episodes_recorded_as_solved(scripted):
    recs = await run_endpoint_async(endpoint(scripted), range(64), RunnerConfig(concurrency=16))
    assert [r.seed for r in recs] == list(range(64))
    solved = [r for r in recs if r.success]
    assert len(solved) == 63
    for r in solved:
        assert r.stop_reason is StopReason.GOAL and r.reward == 1.0 and r.path_efficiency == 1.0
        assert r.num_turns == r.optimal_moves + 1 and r.invalid_actions == 0
        assert r.turns[-1].action == ["stop", "stop"] and r.turns[0].prompt_tokens == 64
    (unsolved,) = [r for r in recs if not r.success]
    assert unsolved.optimal_moves == 16 and unsolved.stop_reason is StopReason.TURN_LIMIT and unsolved.num_turns == 15


async def test_an_episode_a_gateway_named_the_version_of_is_reported_under_its_session(scripted):
    cfg = RunnerConfig(concurrency=4)
    recs = await run_endpoint_async(endpoint(scripted, "bfs?served=v1"), [0, 1, 2], cfg)
    assert {r.model for r in recs} == {"bfs?served=v1@v1"}
    sent = scripted.outcomes()
    assert sorted(o["solved"] for o in sent) == [True, True, True] and {o["model"] for o in sent} == {"bfs?served=v1@v1"}
    assert all(o["error"] is False and o["latency_s"] > 0 for o in sent)
    # each outcome names the session its episode's requests carried (the key the canary split used)
    sessions = {m["session"] for m in scripted.requests()}
    assert {o["session"] for o in sent} == sessions and len(sessions) == 3
    # a server that names no version, or a runner told not to, sends nothing
    await run_endpoint_async(endpoint(scripted, "bfs"), [0], cfg)
    quiet = EndpointConfig(base_url=scripted.url, model="bfs?served=v1", report_outcomes=False)
    await run_endpoint_async(quiet, [0], cfg)
    assert len(scripted.outcomes()) == 3


async def test_malformed_replies_become_parse_failure_turns(scripted):
    recs = await run_endpoint_async(endpoint(scripted, "bfs?malformed=1"), [0], RunnerConfig())
    (rec,) = recs
    assert rec.stop_reason is StopReason.TURN_LIMIT and rec.num_turns == 15 and not rec.success
    assert rec.parse_failures == 15 and all(t.action is None for t in rec.turns)
    assert all(t.agent == rec.start for t in rec.turns)  # the env was never stepped
    sent = scripted.requests()[-1]["messages"]
    assert sent[-1]["content"][0]["text"] == TUPLE.parse_failure_text()
    assert sent[-1]["content"][1]["type"] == "image_url"


async def test_some_malformed_replies_still_solve(scripted):
    recs = await run_endpoint_async(endpoint(scripted, "bfs?malformed=0.3"), range(8), RunnerConfig())
    assert sum(r.parse_failures for r in recs) > 0
    assert all(r.stop_reason in (StopReason.GOAL, StopReason.TURN_LIMIT) for r in recs)
    assert any(r.success for r in recs)


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_transient_failures_are_retried(scripted, status):
    cfg = RunnerConfig(retry=FAST_RETRY)
    (rec,) = await run_endpoint_async(endpoint(scripted, f"bfs?fail_first=2&status={status}"), [1], cfg)
    assert rec.success and all(t.retries == 2 for t in rec.turns)
    assert scripted.stats()["requests"] == 3 * rec.num_turns


async def test_retries_are_bounded_and_mark_the_episode_errored(scripted):
    cfg = RunnerConfig(retry=FAST_RETRY)
    (rec,) = await run_endpoint_async(endpoint(scripted, "bfs?fail_first=99&status=500"), [1], cfg)
    assert rec.stop_reason is StopReason.ERROR and not rec.success and rec.num_turns == 0
    assert "500" in rec.error and "4 attempt" in rec.error
    assert scripted.stats()["requests"] == 4


@pytest.mark.parametrize("status", [429, 503])
async def test_an_unavailable_or_limiting_endpoint_is_waited_out_past_the_attempts(scripted, status):
    waits = EndpointWaits()
    policy = OpenAIPolicy(EndpointConfig(base_url=scripted.url, model=f"bfs?fail_first=9&status={status}"))
    (rec,) = await run_episodes_async(policy, [1], RunnerConfig(retry=FAST_RETRY), waits=waits)
    await policy.aclose()
    assert rec.success and all(t.retries == 9 for t in rec.turns)  # 9 failures per turn, max_attempts 4
    assert waits.outages == rec.num_turns and waits.waited_s > 0 and waits.waiting_since is None
    assert waits.rate_limited == (9 * rec.num_turns if status == 429 else 0)


async def test_waiting_is_bounded_by_time(scripted):
    cfg = RunnerConfig(retry=FAST_RETRY.model_copy(update={"wait_budget_s": 0.5}))
    t0 = time.perf_counter()
    (rec,) = await run_endpoint_async(endpoint(scripted, "bfs?fail_first=9999&status=503"), [1], cfg)
    assert rec.stop_reason is StopReason.ERROR and rec.num_turns == 0
    assert "unavailable after 0s" in rec.error or "unavailable after 1s" in rec.error
    assert time.perf_counter() - t0 >= 0.5
    # The bound in requests, which a slow machine only lowers (a wall-clock ceiling fails on a loaded
    # one): waits of at least half the backoff (0.005, 0.01, 0.02, then 0.025 s) fill 0.5 s in 22.
    assert 2 <= scripted.stats()["requests"] <= 24


async def test_episode_retry_budget_is_shared_across_turns(scripted):
    cfg = RunnerConfig(retry=RetryPolicy(max_attempts=4, backoff_initial_s=0.0, episode_budget=5))
    (rec,) = await run_endpoint_async(endpoint(scripted, "bfs?fail_first=2&status=500"), [1], cfg)
    # 2 retries per turn: turns 1 and 2 spend 4, turn 3 exhausts the budget of 5.
    assert rec.stop_reason is StopReason.ERROR and rec.num_turns == 2


@pytest.mark.parametrize("model, status", [("nope", 404), ("bfs?fail_first=1&status=400", 400)])
async def test_permanent_failures_are_not_retried(scripted, model, status):
    (rec,) = await run_endpoint_async(endpoint(scripted, model), [0], RunnerConfig(retry=FAST_RETRY))
    assert rec.stop_reason is StopReason.ERROR and f"HTTP {status}" in rec.error
    assert scripted.stats()["requests"] == 1


class CountingPolicy(OpenAIPolicy):
    """The endpoint policy, counting the requests it sends (the server may never see one whose
    client gave up before its body was read)."""

    sent = 0

    async def __call__(self, messages, sampling):
        self.sent += 1
        return await super().__call__(messages, sampling)


async def test_timeouts_are_honoured(scripted):
    cfg = RunnerConfig(retry=RetryPolicy(max_attempts=2, backoff_initial_s=0.0, wait_budget_s=0.5))
    policy = CountingPolicy(endpoint(scripted, "bfs?delay=5", timeout_s=0.3))
    try:
        (rec,) = await run_episodes_async(policy, [0], cfg)
    finally:
        await policy.aclose()
    # Each request gave up after 0.3 s, not the server's 5 s (its reply would have been a move); the
    # first timeout starts the 0.5 s wait for the endpoint, which holds one or two more of them.
    assert rec.stop_reason is StopReason.ERROR and "Timeout" in rec.error and rec.num_turns == 0
    assert 2 <= policy.sent <= 3


@pytest.mark.parametrize("concurrency", [1, 4])
async def test_concurrency_is_respected(scripted, concurrency):
    cfg = RunnerConfig(concurrency=concurrency, max_turns=2)
    # The server holds replies until `concurrency` requests were in flight at once (5 s at most),
    # so the runner reaching its concurrency does not depend on how fast this machine sends them;
    # one past it would show as a larger maximum.
    await run_endpoint_async(endpoint(scripted, f"bfs?delay=0.05&gather={concurrency}"), range(12), cfg)
    assert scripted.stats()["max_in_flight"] == concurrency


async def test_messages_have_the_exact_protocol_shape(scripted):
    (rec,) = await run_endpoint_async(endpoint(scripted), [0], RunnerConfig())
    reqs = [r["messages"] for r in scripted.requests()]
    assert len(reqs) == rec.num_turns
    first = reqs[0]
    assert len(first) == 1 and first[0]["role"] == "user"
    assert [p["type"] for p in first[0]["content"]] == ["text", "image_url"]
    assert first[0]["content"][0]["text"] == TUPLE.initial_text(7, 7)
    assert first[0]["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")
    last = reqs[-1]
    assert [m["role"] for m in last] == ["user", "assistant"] * (rec.num_turns - 1) + ["user"]
    assert last[1]["content"] == rec.turns[0].reply
    assert last[2]["content"][0]["text"] == rec.turns[0].feedback
    assert all(m["role"] != "system" for m in last)


async def test_window_history_bounds_what_is_sent(scripted):
    (rec,) = await run_endpoint_async(endpoint(scripted), [0], RunnerConfig(history="window:1"))
    assert rec.success and rec.history == "window:1"
    for msgs in (r["messages"] for r in scripted.requests()):
        assert len(msgs) <= 3
        assert msgs[0]["content"][0]["text"].startswith("You are navigating a 7x7 maze.")


async def test_keyword_protocol_end_to_end(scripted):
    cfg = RunnerConfig(protocol="keyword", env_id="maze_2d/easy")
    recs = await run_endpoint_async(endpoint(scripted, "bfs?protocol=keyword"), range(4), cfg)
    assert all(r.success and r.protocol == "keyword/v1" for r in recs)


def test_plain_callable_policy_and_jsonl_replay(tmp_path):
    recs = run_episodes(bfs_policy(), [EpisodeSpec(seed=s) for s in range(3)], RunnerConfig(env_id="maze_2d/hard"))
    assert all(r.success for r in recs)
    calls = []

    def always_up(messages):
        calls.append(len(messages))
        return "('move', 1)"

    (stuck,) = run_episodes(always_up, [0], RunnerConfig(max_turns=3))
    assert stuck.num_turns == 3 and stuck.wall_bumps == 3 and calls == [1, 3, 5]

    path = tmp_path / "episodes.jsonl"
    write_jsonl(recs + [stuck], path)
    loaded = list(read_jsonl(path))
    assert loaded == recs + [stuck]
    frames = replay_frames(loaded[0])
    env = MazeEnv(size=11)
    first, _ = env.reset(seed=0)
    assert len(frames) == loaded[0].num_turns + 1 and (frames[0] == first).all()


def test_replay_detects_a_corrupt_trajectory(tmp_path):
    (rec,) = run_episodes(bfs_policy(), [0])
    rec.turns[2].agent = [1, 1]
    with pytest.raises(ValueError, match="turn 3"):
        replay_frames(rec)


def test_runner_config_rejects_bad_values():
    with pytest.raises(ValueError, match="unknown env id"):
        RunnerConfig(env_id="maze_2d/giant")
    with pytest.raises(ValueError, match="unknown protocol"):
        RunnerConfig(protocol="json")
    with pytest.raises(ValueError):
        RunnerConfig(concurrency=0)


def test_each_episode_has_one_session_key_of_its_own():
    """The runner names each episode once (OpenAIPolicy sends it as X-Session-Id, which a gateway's
    canary split keys on): every turn of an episode sees the same key, concurrent episodes differ."""
    from agent.runner import EPISODE_SESSION

    seen: list[tuple[int, str | None]] = []

    async def wander(messages):
        await asyncio.sleep(0)  # let the concurrent episodes interleave
        seen.append((id(messages[0]), EPISODE_SESSION.get()))
        return "('move', 0)"

    run_episodes(wander, range(6), RunnerConfig(max_turns=3, concurrency=6))
    by_episode: dict[int, set] = {}
    for first_message, key in seen:
        by_episode.setdefault(first_message, set()).add(key)
    assert len(seen) == 18 and len(by_episode) == 6
    assert all(len(keys) == 1 and None not in keys for keys in by_episode.values())
    assert len(set.union(*by_episode.values())) == 6


@pytest.mark.parametrize("protocol", ["tuple", "keyword"])
def test_replayed_conversation_is_what_the_runner_sent(protocol):
    seen: list[list[dict]] = []
    bfs = bfs_policy(protocol)

    def sometimes_garbled(messages):
        seen.append(list(messages))  # the full history is the runner's own list, which grows
        return "no idea" if len(seen) % 3 == 0 else bfs.fn(messages)  # parse failures count as turns

    (rec,) = run_episodes(sometimes_garbled, [4], RunnerConfig(protocol=protocol, history="full", max_turns=12))
    assert rec.parse_failures > 0
    conversation = replay_conversation(rec)
    # The last request held the whole conversation before the last reply; the replay adds that
    # reply and the env's answer to it.
    assert conversation[:-2] == seen[-1] and len(conversation) == 2 * rec.num_turns + 1
    assert conversation[-2] == {"role": "assistant", "content": rec.turns[-1].reply}
    assert conversation[-1]["content"][0]["text"] == rec.turns[-1].feedback


async def test_a_reply_outliving_a_reset_leaves_the_new_counts_alone(scripted):
    """The scripted server's counts start clean at a reset even while an earlier request is still
    being answered (one a test's client gave up on): it must not take one off the next test's."""
    import httpx

    root = scripted.url.removesuffix("/v1")
    body = {"model": "bfs?delay=1.5", "messages": [{"role": "user", "content": "hi"}]}
    async with httpx.AsyncClient(timeout=10) as http:
        slow = asyncio.ensure_future(http.post(f"{scripted.url}/chat/completions", json=body))
        while (await http.get(f"{root}/stats")).json()["in_flight"] < 1:
            assert not slow.done(), "the 1.5 s reply ended before the server counted it in flight"
            await asyncio.sleep(0.01)
        (await http.post(f"{root}/stats/reset")).raise_for_status()
        await slow
        assert (await http.get(f"{root}/stats")).json() == {"requests": 0, "max_in_flight": 0, "in_flight": 0}
