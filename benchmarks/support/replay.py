"""The same turns for two models: episodes recorded once, then replayed to each model request by
request, every reply held to its recorded length.

Two models' own episodes are different workloads: a policy that walks into a wall sees the same
frame again (cached processed images, a shorter prefill), one that solves the maze sees a new frame
every turn and stops sooner. Replaying one recording to both holds the prompts, the images, the
number of turns and the reply tokens fixed (``min_tokens`` = ``max_tokens`` = the recorded count),
so the difference left is the model's own cost.
"""

from __future__ import annotations

import asyncio
import copy
import time
from typing import Any

import httpx

from agent.runner import EPISODE_SESSION, EndpointConfig, OpenAIPolicy, RunnerConfig, run_episodes_async

#: One recorded episode: its requests' messages in order, each with the reply's token count.
Episode = list[tuple[list[dict[str, Any]], int]]


class RecordingPolicy(OpenAIPolicy):
    """The runner's endpoint policy, keeping each episode's requests and reply lengths."""

    def __init__(self, endpoint: EndpointConfig):
        super().__init__(endpoint)
        self.episodes: dict[str, Episode] = {}

    async def __call__(self, messages, sampling):
        reply = await super().__call__(messages, sampling)
        turn = (copy.deepcopy(messages), max(1, reply.completion_tokens or 1))
        self.episodes.setdefault(EPISODE_SESSION.get() or "", []).append(turn)
        return reply


async def record(url: str, model: str, seeds: list[int], cfg: RunnerConfig) -> list[Episode]:
    """Play ``seeds`` on ``model`` as the runner does; the episodes' requests."""
    policy = RecordingPolicy(EndpointConfig(base_url=url, model=model, timeout_s=600))
    try:
        await run_episodes_async(policy, seeds, cfg)
    finally:
        await policy.aclose()
    return list(policy.episodes.values())


async def replay(url: str, model: str, episodes: list[Episode], concurrency: int) -> dict:
    """Every episode's turns in order, ``concurrency`` episodes at once, to ``model``; turns/s and
    reply tokens over the turns answered 200. ``errors``: the episodes whose replay stopped at a
    refused turn (its later turns are not sent); a connection failure raises."""
    gate = asyncio.Semaphore(concurrency)
    answered, failed, tokens = 0, 0, 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as http:

        async def one(turns: Episode) -> None:
            nonlocal answered, failed, tokens
            async with gate:
                for messages, n in turns:
                    r = await http.post("/chat/completions", json={
                        "model": model, "messages": messages, "temperature": 0, "max_tokens": n, "min_tokens": n})
                    if r.status_code != 200:
                        failed += 1
                        return
                    answered += 1
                    tokens += n

        t0 = time.perf_counter()
        await asyncio.gather(*(one(e) for e in episodes))
        wall = time.perf_counter() - t0
    return {"episodes": len(episodes), "turns": answered, "wall_s": round(wall, 3),
            "turns_per_s": round(answered / wall, 2), "errors": failed, "reply_tokens": tokens}


__all__ = ["Episode", "RecordingPolicy", "record", "replay"]
