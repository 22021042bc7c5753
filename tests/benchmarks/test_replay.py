"""benchmarks/support/replay.py against the scripted server: episodes recorded through the runner's
policy, replayed request by request, and a request the endpoint refuses counted as an error."""

from __future__ import annotations

import asyncio

from agent import RunnerConfig
from benchmarks.support.replay import record, replay


def test_recorded_episodes_replay_turn_for_turn_and_refusals_count_as_errors(scripted):
    episodes = asyncio.run(record(scripted.url, "bfs", [0, 1], RunnerConfig()))
    turns = sum(len(e) for e in episodes)
    assert len(episodes) == 2 and turns > 2
    sent_before = scripted.stats()["requests"]
    out = asyncio.run(replay(scripted.url, "bfs", episodes, concurrency=2))
    assert out["episodes"] == 2 and out["turns"] == turns and out["errors"] == 0
    assert out["reply_tokens"] == sum(n for e in episodes for _, n in e)
    assert scripted.stats()["requests"] - sent_before == turns
    # A model the endpoint does not serve: each episode's replay stops at its first turn's 404.
    failing = asyncio.run(replay(scripted.url, "nope", episodes, concurrency=2))
    assert failing["errors"] == 2 and failing["turns"] == 0 and failing["reply_tokens"] == 0
