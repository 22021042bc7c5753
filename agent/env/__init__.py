"""The gymnasium env: :class:`MazeEnv` (VisGym's ``maze_2d``), its VLM env API and its registration.

:mod:`~agent.env.maze_2d` is the env; :mod:`~agent.env.vlm_api` the pure answers behind VisGym's VLM
env API and the readers that work on any env speaking it (this one or VisGym's own);
:mod:`~agent.env.registration` the variants (``maze_2d/simple``, ``maze_2d/easy``,
``maze_2d/hard``) and their registration by string entry point.
"""

from agent.env.maze_2d import ENV_SPEC_VERSION, MazeEnv
from agent.env.registration import DEFAULT_ENV_ID, ENV_ENTRY_POINT, VARIANTS, get_variant, register_envs
from agent.env.vlm_api import positions, read_env

__all__ = [
    "DEFAULT_ENV_ID",
    "ENV_ENTRY_POINT",
    "ENV_SPEC_VERSION",
    "VARIANTS",
    "MazeEnv",
    "get_variant",
    "positions",
    "read_env",
    "register_envs",
]
