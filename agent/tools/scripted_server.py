"""A scripted OpenAI-compatible chat server that plays mazes with a BFS policy.

For runner tests, benchmarks and demos without a model. It reads the maze from the last image
in each request, so it exercises the real protocol end to end. Faults are chosen per request
by query parameters in the model id, deterministically, so one server covers every test case::

    bfs                              perfect play
    bfs?malformed=0.3                ~30% of replies unparseable (hash of the request decides)
    bfs?fail_first=2&status=429      each distinct request fails twice with 429, then succeeds
    bfs?delay=0.5                    every reply waits 0.5 s
    bfs?gather=4                     replies wait (5 s at most) until 4 requests were in flight at once
    bfs?protocol=keyword             reply in the keyword protocol
    bfs?served=v1                    answer as model ``bfs?served=v1@v1``, as a gateway names the version
                                     that served a name (the runner then reports each episode's outcome)
    bfs:noisy                        a listed "adapter" preset (see PRESETS)

``GET /stats`` reports requests served and the most requests seen in flight at once;
``GET /requests`` returns the last requests' messages; ``POST /v1/outcomes`` takes an episode's
outcome as a gateway does and ``GET /outcomes`` returns the last ones; ``POST /stats/reset`` clears them all.

Run: ``python -m agent.tools.scripted_server --port 8001`` (prints ``READY <base_url>`` when serving).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import time
from collections import Counter, deque
from typing import Any
from urllib.parse import parse_qsl

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agent.runner import solver_reply

log = logging.getLogger(__name__)


class _State:
    def __init__(self) -> None:
        self.generation = 0
        self.reset()

    def reset(self) -> None:
        # A request still in the handler at a reset (a slow reply the last test's client gave up on)
        # belongs to the old counts: leaving it would take one off the new in-flight count.
        self.generation += 1
        self.requests = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.attempts: Counter[str] = Counter()
        self.recent: deque[dict[str, Any]] = deque(maxlen=64)
        self.outcomes: deque[dict[str, Any]] = deque(maxlen=256)


#: Adapters the server lists as ``bfs:<name>``: fault presets, so clients that check
#: ``/v1/models`` (like ``maze-eval``) can evaluate them.
PRESETS: dict[str, str] = {"perfect": "", "noisy": "malformed=0.3", "broken": "malformed=1", "slow": "delay=0.05",
                           "flaky": "fail_first=1&status=503"}


def _options(model: str) -> dict[str, str] | None:
    """Fault options of a model id, or None when the id names no model here."""
    name, _, query = model.partition("?")
    base, _, adapter = name.partition(":")
    if base != "bfs" or (adapter and adapter not in PRESETS):
        return None
    return {**dict(parse_qsl(PRESETS.get(adapter, ""))), **dict(parse_qsl(query))}


def _error(status: int, message: str, code: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "scripted_error", "code": code}}, status_code=status)


def create_app() -> FastAPI:
    """The FastAPI app (one state per app)."""
    app = FastAPI(title="maze scripted server")
    state = _State()

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        ids = ["bfs"] + [f"bfs:{name}" for name in PRESETS]
        return {"object": "list", "data": [{"id": i, "object": "model", "owned_by": "maze-gateway"} for i in ids]}

    @app.get("/stats")
    async def stats() -> dict[str, Any]:
        return {"requests": state.requests, "max_in_flight": state.max_in_flight, "in_flight": state.in_flight}

    @app.post("/stats/reset")
    async def reset() -> dict[str, bool]:
        state.reset()
        return {"ok": True}

    @app.get("/requests")
    async def requests() -> list[dict[str, Any]]:
        return list(state.recent)

    @app.post("/v1/outcomes")
    async def outcome(request: Request) -> dict[str, Any]:
        state.outcomes.append(await request.json())
        return {"object": "outcome", "counted": False, "reason": "a scripted server keeps no guard"}

    @app.get("/outcomes")
    async def outcomes() -> list[dict[str, Any]]:
        return list(state.outcomes)

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        model, messages = body.get("model", ""), body.get("messages")
        state.requests += 1
        opts = _options(model)
        if opts is None:
            return _error(404, f"model {model!r} does not exist", "model_not_found")
        if not isinstance(messages, list) or not messages:
            return _error(400, "messages must be a non-empty list", "invalid_messages")
        key = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()
        generation, attempts = state.generation, state.attempts  # the counts of this request's reset
        state.in_flight += 1
        state.max_in_flight = max(state.max_in_flight, state.in_flight)
        state.recent.append({"model": model, "messages": messages, "session": request.headers.get("x-session-id")})
        try:
            await asyncio.sleep(float(opts.get("delay", 0)))
            await _gathered(state, int(opts.get("gather", 0)))
            attempts[key] += 1
            if attempts[key] <= int(opts.get("fail_first", 0)):
                status = int(opts.get("status", 500))
                return _error(status, f"scripted failure {attempts[key]}", "scripted")
            if int(key[:8], 16) / 0xFFFFFFFF < float(opts.get("malformed", 0)):
                text = "I am not sure where to go."
            else:
                text = solver_reply(messages, opts.get("protocol", "tuple"))
        finally:
            if state.generation == generation:
                state.in_flight -= 1
        return {
            "id": f"chatcmpl-{key[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": f"{model}@{opts['served']}" if opts.get("served") else model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 64 * len(messages), "completion_tokens": 6, "total_tokens": 64 * len(messages) + 6},
        }

    return app


async def _gathered(state: _State, n: int, limit_s: float = 5.0) -> None:
    """Hold a reply until ``n`` requests have been in flight at once (since the last reset): a
    client's concurrency then shows in ``max_in_flight`` however slowly the machine runs it. The
    limit stays under a client's usual timeout, so a client that never gets there fails, not hangs."""
    deadline = time.monotonic() + limit_s
    while state.max_in_flight < n and time.monotonic() < deadline:
        await asyncio.sleep(0.005)


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    # Let uvicorn bind the port itself (port 0: the kernel picks a free one): on a pre-bound socket
    # it leaves Nagle on for accepted connections, which stalls keep-alive requests by ~40 ms (delayed ACK).
    server = uvicorn.Server(uvicorn.Config(create_app(), host=args.host, port=args.port, log_level="warning",
                                           access_log=False))

    async def serve() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if server.started:
            port = server.servers[0].sockets[0].getsockname()[1]  # the one bound, when --port was 0
            print(f"READY http://{args.host}:{port}/v1", flush=True)
        await task

    asyncio.run(serve())


if __name__ == "__main__":
    main()
