"""The maze as an OpenEnv environment server (``maze-env serve``), on ``openenv-core``'s HTTP server.

OpenEnv's protocol as ``openenv-core`` serves it: ``POST /reset`` and ``POST /step`` (one-shot:
each request gets a fresh environment, so ``/step`` over HTTP has no episode to step), ``GET
/state``, ``/schema``, ``/health``, ``/metadata``, and the WebSocket ``/ws`` where each connection
is a session with its own :class:`MazeEnvironment` (what OpenEnv's ``EnvClient`` and
``GenericEnvClient`` speak). Reset takes ``seed`` and ``variant``; a step takes one ``action``
field with the VisGym action text. Sessions past ``max_sessions`` are refused with OpenEnv's
``CAPACITY_REACHED`` error, sessions idle longer than ``idle_timeout_s`` are closed by OpenEnv's
reaper, and a request the maze cannot serve is a 4xx (HTTP) or an error message (WebSocket) that
names the problem, never a 500.
"""

from __future__ import annotations

import socket
import uuid
from typing import Any

import gymnasium as gym
import numpy as np
from fastapi import FastAPI, Request, WebSocketDisconnect
from fastapi.responses import JSONResponse
from openenv.core.env_server import ConcurrencyConfig, Environment, create_fastapi_app
from openenv.core.env_server.types import EnvironmentMetadata
from pydantic import BaseModel, ConfigDict, Field

from agent.env import DEFAULT_ENV_ID, ENV_SPEC_VERSION, VARIANTS, get_variant, read_env, register_envs
from agent.maze import png_data_url
from agent.protocol import TUPLE
from maze_gateway.openenv_types import MazeAction, MazeObservation, MazeState

DEFAULT_PORT = 8010
DEFAULT_MAX_SESSIONS = 64
DEFAULT_IDLE_TIMEOUT_S = 300.0
MAX_EPISODE_ID_CHARS = 255  # OpenEnv's own bound on the HTTP reset's episode_id

__all__ = ["DEFAULT_PORT", "EnvServerConfig", "MazeEnvironment", "MazeRequestError", "build_app", "serve"]


class MazeRequestError(ValueError):
    """A reset or step the maze cannot serve; ``status_code`` is its HTTP status."""

    status_code = 422


class NoEpisode(MazeRequestError):
    """A step with no episode to step: before a reset, after the stop, or in a closed session."""

    status_code = 409


class EnvServerConfig(BaseModel):
    """How ``maze-env serve`` listens and how many sessions it keeps."""

    model_config = ConfigDict(extra="forbid")

    host: str = Field("127.0.0.1", description="interface to listen on")
    port: int = Field(DEFAULT_PORT, ge=0, le=65535, description="TCP port (0: any free port)")
    max_sessions: int = Field(DEFAULT_MAX_SESSIONS, ge=1, description="WebSocket sessions open at once; "
                                                                        "one more is refused with CAPACITY_REACHED")
    idle_timeout_s: float = Field(DEFAULT_IDLE_TIMEOUT_S, gt=0, description="a session idle this long is closed "
                                                                             "and its slot freed")


class MazeEnvironment(Environment[MazeAction, MazeObservation, MazeState]):
    """One session's maze: reset to a seeded maze of a variant, then step with action text."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # every session builds its own instance and env; nothing is shared

    def __init__(self) -> None:
        super().__init__()
        self._env: Any = None
        self._state = MazeState()
        self._closed = False

    def reset(self, seed: int | None = None, episode_id: str | None = None, variant: str = DEFAULT_ENV_ID,
              **unknown: Any) -> MazeObservation:
        if unknown:
            raise MazeRequestError(f"unknown reset argument(s) {sorted(unknown)}; reset takes seed, variant "
                                   "and episode_id")
        self._check_open()
        _check_reset(seed, episode_id, variant)
        register_envs()
        env = gym.make(variant, disable_env_checker=True).unwrapped  # the runner's env (VisGym's, when it owns the id)
        frame, info = env.reset(seed=seed)
        self._env = env
        self._state = MazeState(episode_id=episode_id or uuid.uuid4().hex, variant=variant, seed=seed,
                                max_turns=get_variant(variant).max_turns)
        return _observation(frame, info, TUPLE.initial_text(*read_env(env)), reward=None, done=False)

    def step(self, action: MazeAction, timeout_s: float | None = None, **kwargs: Any) -> MazeObservation:
        self._check_open()
        if self._env is None:
            raise NoEpisode("no episode to step: reset first (over HTTP every request gets a fresh environment; "
                            "play an episode over the WebSocket session, /ws)")
        if self._state.done:
            raise NoEpisode("the episode is over (it ended with a stop): reset to play again")
        frame, reward, terminated, _, info = self._env.step(action.action)
        self._state.step_count += 1
        self._state.done = bool(terminated)
        feedback = str(info.get("feedback") or info.get("env_feedback") or "")
        return _observation(frame, info, feedback, reward=float(reward), done=bool(terminated))

    @property
    def state(self) -> MazeState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name="maze_2d", version=ENV_SPEC_VERSION,
                                   description="VisGym 2D mazes seen as images (variants "
                                               f"{', '.join(sorted(VARIANTS))}), solved one move at a time; "
                                               "reward 1.0 for stopping on the goal")

    def close(self) -> None:
        # OpenEnv closes a session's environment when the socket ends or the reaper expires it; an
        # expired session's socket may still send, and is told so.
        self._closed, self._env = True, None

    def _check_open(self) -> None:
        if self._closed:
            raise NoEpisode("no open episode in this session: a session ends with its socket or after --idle-timeout "
                            "seconds without a call; open a new session")


def _check_reset(seed: Any, episode_id: Any, variant: Any) -> None:
    """Refuse (422) reset fields of the wrong type or value. Over the WebSocket they arrive as any
    JSON (OpenEnv passes ``data`` through), over HTTP ``variant`` does: a list there must be the
    caller's error, not a 500 from a failed lookup."""
    if not isinstance(variant, str) or variant not in VARIANTS:
        raise MazeRequestError(f"unknown variant {variant!r}; known: {sorted(VARIANTS)}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise MazeRequestError(f"seed must be an integer >= 0, got {seed!r}")
    if episode_id is not None and (not isinstance(episode_id, str) or len(episode_id) > MAX_EPISODE_ID_CHARS):
        raise MazeRequestError(f"episode_id must be a string of at most {MAX_EPISODE_ID_CHARS} characters")


def _observation(frame: np.ndarray, info: dict[str, Any], text: str, *, reward: float | None,
                 done: bool) -> MazeObservation:
    visgym_info = {
        "agent": [int(v) for v in info["agent"]],
        "target": [int(v) for v in info["target"]],
        "maze_map": np.asarray(info["maze_map"], dtype=int).tolist(),
        "distance": float(info["distance"]),
        "env_feedback": str(info.get("env_feedback") or ""),
    }
    return MazeObservation(image=png_data_url(frame), text=text, info=visgym_info, reward=reward, done=done)


class _QuietSocketClose:
    """ASGI middleware: a session whose client already closed its socket ends quietly.

    ``openenv-core`` closes the socket at the end of every session and ignores only a
    ``RuntimeError`` there; Starlette raises ``WebSocketDisconnect`` when the client closed first
    (as OpenEnv's own client does), which uvicorn would log as an application error, with a
    traceback, for every session that ends normally.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            pass


async def _request_error(_request: Request, exc: Exception) -> JSONResponse:
    status = exc.status_code if isinstance(exc, MazeRequestError) else 422
    return JSONResponse(status_code=status, content={"detail": str(exc)})


def build_app(cfg: EnvServerConfig | None = None) -> FastAPI:
    """The OpenEnv app of the maze (routes, sessions and their reaper are ``openenv-core``'s)."""
    cfg = cfg or EnvServerConfig()
    concurrency = ConcurrencyConfig(max_concurrent_envs=cfg.max_sessions, session_timeout=cfg.idle_timeout_s)
    app = create_fastapi_app(MazeEnvironment, MazeAction, MazeObservation, concurrency_config=concurrency)
    app.add_exception_handler(MazeRequestError, _request_error)
    app.add_middleware(_QuietSocketClose)
    return app


def bind(cfg: EnvServerConfig) -> socket.socket:
    """The listening socket, bound before the server starts so a taken port is an ``OSError`` here."""
    sock = socket.socket(socket.AF_INET6 if ":" in cfg.host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((cfg.host, cfg.port))
    except OSError:
        sock.close()
        raise
    return sock


def serve(cfg: EnvServerConfig, sock: socket.socket | None = None) -> None:
    """Serve the maze until interrupted (``sock``: an already bound socket, see :func:`bind`)."""
    import uvicorn

    sock = sock or bind(cfg)
    server = uvicorn.Server(uvicorn.Config(build_app(cfg), log_level="warning", ws_max_size=16 * 1024 * 1024))
    server.run(sockets=[sock])
