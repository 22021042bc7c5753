"""Names the skyrl-gym env, the datasets and the spec share, in a module without heavy imports.

``maze-train render`` and friends need them without importing skyrl-gym (whose env registry
imports every built-in env, about half a second).
"""

from __future__ import annotations

from typing import Literal

#: skyrl-gym env class of the project's maze env.
ENV_CLASS = "maze_visgym"
#: The env class SkyRL's VisGym example and its datasets use; registered to the same env.
VISGYM_ENV_CLASS = "visgym"
#: ``module:Class`` skyrl-gym imports to build the env.
ENTRY_POINT = "training.skyrl.env:MazeTextEnv"

#: ``sft`` and ``instruct`` are SkyRL's VisGym recipes (their prompts, parsers and rewards);
#: ``task`` and ``task+parsed`` speak this project's prompt protocol, as the runner does.
RewardMode = Literal["task", "task+parsed", "sft", "instruct"]
REWARD_MODES: tuple[str, ...] = ("task", "task+parsed", "sft", "instruct")
#: The protocol each SkyRL recipe speaks (tuple actions, or keyword actions in <action> tags).
RECIPE_PROTOCOLS: dict[str, str] = {"sft": "tuple", "instruct": "keyword"}
