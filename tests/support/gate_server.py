"""A gateway stand-in for the offline gate's tests: the gateway's real management routes
(``serving.ingress.management``, auth off) over a real adapter store, and scripted OpenAI routes that
serve the store's versions, each version failing the mazes a test chooses.

``/v1/models`` lists the base (``bfs``) and every published name; ``/v1/models/{id}`` reports the
version a name serves, or 404 for a version the store lacks, as the gateway's model cards do.
``/v1/chat/completions`` answers only a pinned ``bfs:name@version`` (the gate must pin both versions:
an unpinned request is a 400 here, and ``requests`` lists what was asked): a version plays the
scripted BFS policy, and on a maze it is set to fail (:meth:`GateServer.fail`) it stops at once.
A maze is known by its walls and goal (what the frame shows), so a seed whose maze repeats another
seed's shares its fate: :func:`maze_key` says which.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from functools import lru_cache

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agent.protocol import get_protocol
from agent.runner.policies import last_image, read_frame, solver_reply
from serving.adapters import AdapterStore, ModelId
from serving.config import ServingConfig
from serving.errors import AdapterNotFound, ServingError
from tests.support.uvicorn_thread import serving  # noqa: F401 - its users take it from here too


def _key(frame) -> bytes:
    grid, _, goal = read_frame(frame)
    return grid.tobytes() + bytes(goal)


@lru_cache(maxsize=1024)
def maze_key(seed: int, env_id: str = "maze_2d/simple") -> bytes:
    """What identifies seed ``seed``'s maze in a frame: its walls and goal."""
    import gymnasium as gym

    from agent.env import register_envs

    register_envs()
    frame, _ = gym.make(env_id).reset(seed=seed)
    return _key(frame)


class GateServer:
    """The stand-in's state: the store it serves and the mazes each version fails."""

    def __init__(self, store: AdapterStore, base: str = "bfs"):
        self.store, self.base = store, base
        self.failing: dict[str, set[bytes]] = {}
        self.requests: list[str] = []

    def fail(self, version: str, seeds: Iterable[int]) -> None:
        """Make ``version`` fail the mazes of ``seeds`` (it stops on its first turn there)."""
        self.failing.setdefault(version, set()).update(maze_key(s) for s in seeds)

    def solves(self, version: str, seed: int) -> bool:
        """Whether ``version`` is set to solve ``seed``'s maze (the BFS policy may still run out of turns)."""
        return maze_key(seed) not in self.failing.get(version, set())

    def app(self) -> FastAPI:
        from serving.ingress.management import router

        app = FastAPI(title="gate test gateway")
        data = ServingConfig.shipped("embedded").model_dump(mode="json")
        data["adapters"], data["extensions"] = self.store.spec.model_dump(mode="json"), []
        app.state.gateway_config = ServingConfig.model_validate(data)
        app.include_router(router)

        @app.exception_handler(ServingError)
        async def serving_error(_request: Request, exc: ServingError) -> JSONResponse:
            return JSONResponse({"error": {"message": str(exc), "type": exc.error_type, "code": exc.code}},
                                status_code=exc.status_code)

        @app.get("/v1/models")
        async def models():
            ids = [self.base] + [f"{self.base}:{n}" for n in self.store.list_names()]
            return {"object": "list", "data": [{"id": i, "object": "model"} for i in ids]}

        @app.get("/v1/models/{model:path}")
        async def model(model: str):
            wanted = ModelId.parse(model)
            if not wanted.is_adapter:
                return {"id": model, "object": "model"}
            try:
                ref = (self.store.resolve_version(wanted.name, wanted.version) if wanted.version
                       else self.store.resolve(wanted.name))
            except AdapterNotFound as exc:
                return JSONResponse({"error": {"message": str(exc), "code": "adapter_not_found"}}, status_code=404)
            return {"id": model, "object": "model", "version": ref.version}

        @app.post("/v1/chat/completions")
        async def chat(request: Request):
            body = await request.json()
            model, messages = body["model"], body["messages"]
            self.requests.append(model)
            wanted = ModelId.parse(model)
            if not wanted.version:
                return JSONResponse({"error": {"message": f"{model!r} is not pinned", "code": "bad_request"}},
                                    status_code=400)
            if _key(last_image(messages)) in self.failing.get(wanted.version, set()):
                text = get_protocol("tuple").format_action(("stop", "stop"))
            else:
                text = solver_reply(messages, "tuple")
            return {"id": "chatcmpl-gate", "object": "chat.completion", "created": int(time.time()), "model": model,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 64, "completion_tokens": 6, "total_tokens": 70}}

        return app
