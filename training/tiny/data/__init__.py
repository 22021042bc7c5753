"""What the trainers learn from: SFT's demonstrations and the starts of GRPO's groups.

:mod:`~training.tiny.data.demos` plays solver (and mixed, and recovery) demonstrations in the
runner's exact message format, and reads and writes a model folder's agent profile;
:mod:`~training.tiny.data.perturbed_starts` builds GRPO groups that begin a few random moves into
the maze, :mod:`~training.tiny.data.state_groups` groups rooted at states of greedy episodes. Names
load on first use (the modules pull in torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from training.tiny import lazy_exports

if TYPE_CHECKING:
    from training.tiny.data.demos import DemoConfig, demo_stream, read_profile, write_profile
    from training.tiny.data.perturbed_starts import perturbed_group
    from training.tiny.data.state_groups import branches, pick_states, root_turns

_LAZY = {
    "training.tiny.data.demos": ("DemoConfig", "demo_stream", "read_profile", "write_profile"),
    "training.tiny.data.perturbed_starts": ("perturbed_group",),
    "training.tiny.data.state_groups": ("branches", "pick_states", "root_turns"),
}

__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = ["DemoConfig", "branches", "demo_stream", "perturbed_group", "pick_states", "read_profile", "root_turns",
           "write_profile"]
