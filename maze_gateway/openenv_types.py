"""The maze's OpenEnv wire types: one action field, the frame and the text the model reads, the state.

They extend ``openenv-core``'s ``Action``, ``Observation`` and ``State``, so ``/schema`` describes
them and OpenEnv's clients (its ``GenericEnvClient``, or :class:`~maze_gateway.openenv_client.MazeEnvClient`)
read them as any OpenEnv environment's.
"""

from __future__ import annotations

from typing import Any

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

from agent.env import DEFAULT_ENV_ID

#: Longest action text accepted: a reply is a handful of tokens, and the text is parsed with
#: ``ast.literal_eval``, whose cost grows with the input (the prompt protocol's parser bounds it too).
MAX_ACTION_CHARS = 4096

__all__ = ["MAX_ACTION_CHARS", "MazeAction", "MazeObservation", "MazeState"]


class MazeAction(Action):
    """One move, as the VisGym action text a model writes."""

    action: str = Field(max_length=MAX_ACTION_CHARS,
                        description="VisGym action text: \"('move', d)\" (d = 0 right, 1 up, 2 left, 3 down) "
                                    "or \"('stop', 'stop')\"; anything else is answered with the env's "
                                    "format feedback, not an error")


class MazeObservation(Observation):
    """What the model sees after a reset or a step (``reward`` and ``done`` are OpenEnv's own fields)."""

    image: str = Field(description="the frame (RGB, 25 px per cell) as a data:image/png;base64 URL, "
                                   "pixel-identical to VisGym's")
    text: str = Field(description="the text the model reads next: the task prompt (tuple protocol) after a "
                                  "reset, the env's feedback after a step")
    info: dict[str, Any] = Field(default_factory=dict,
                                 description="VisGym's info keys: agent and target ([row, col]), maze_map "
                                             "(rows of 0 floor / 1 wall), distance (L1 to the goal), "
                                             "env_feedback ('' after a reset)")


class MazeState(State):
    """The session's episode: which maze, how far it got (``step_count`` counts steps taken)."""

    variant: str = Field(DEFAULT_ENV_ID, description="maze variant: maze_2d/simple, maze_2d/easy or maze_2d/hard")
    seed: int | None = Field(None, description="the reset seed; None before the first reset or for an unseeded one")
    max_turns: int | None = Field(None, description="the variant's turn limit, as the project's runner applies it "
                                                    "(the env itself never truncates)")
    done: bool = Field(False, description="the episode ended with a stop; reset to play again")
