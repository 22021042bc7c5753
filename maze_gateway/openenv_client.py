"""A typed OpenEnv client for ``maze-env serve``: OpenEnv's ``EnvClient`` with the maze's types.

Async like every OpenEnv client (``.sync()`` gives the blocking wrapper); one client is one
WebSocket session, so concurrent episodes each open their own::

    async with MazeEnvClient(base_url="http://127.0.0.1:8010") as env:
        result = await env.reset(seed=0, variant="maze_2d/simple")
        result = await env.step("('move', 0)")
        result.observation.image, result.observation.text, result.reward, result.done
"""

from __future__ import annotations

from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from maze_gateway.openenv_types import MazeAction, MazeObservation, MazeState

__all__ = ["MazeEnvClient"]


class MazeEnvClient(EnvClient[MazeAction, MazeObservation, MazeState]):
    """A session on the maze server; ``step`` takes a :class:`MazeAction` or the action text itself."""

    def _step_payload(self, action: MazeAction | str) -> dict[str, Any]:
        if isinstance(action, str):
            action = MazeAction(action=action)
        return action.model_dump(exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[MazeObservation]:
        reward, done = payload.get("reward"), bool(payload.get("done", False))
        observation = MazeObservation(**payload.get("observation", {}), reward=reward, done=done)
        return StepResult(observation=observation, reward=reward, done=done)

    def _parse_state(self, payload: dict[str, Any]) -> MazeState:
        return MazeState.model_validate(payload)
