"""The fast path: how the lab runs the model fast, for training and for quick closed-loop play.

HF's Qwen3-VL forward loops over images in Python, which dominates the cost of a model this small;
every maze image has the same size, so here a frame is an id (:mod:`~training.tiny.fastpath.frames`:
the catalog of every frame, and its pixel values from the model's own image processor), a prompt
is token ids and M-RoPE positions (:mod:`~training.tiny.fastpath.prompts`), and the model runs
batched (:mod:`~training.tiny.fastpath.forward`). :mod:`~training.tiny.fastpath.rollout` plays
multi-turn episodes on it the way ``agent.runner`` does, all episodes a turn at a time. Names load
on first use (the modules pull in torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from training.tiny import lazy_exports

if TYPE_CHECKING:
    from training.tiny.fastpath.forward import FastQwen3VL, collate
    from training.tiny.fastpath.frames import FrameBank, FrameCatalog, frame_rows, frame_url, to_openai_messages
    from training.tiny.fastpath.prompts import PromptCodec, make_codec
    from training.tiny.fastpath.rollout import (
        Episode,
        RolloutSettings,
        Turn,
        force_reply,
        new_episode,
        play,
        play_on,
        solve_rate,
    )

_LAZY = {
    "training.tiny.fastpath.forward": ("FastQwen3VL", "collate"),
    "training.tiny.fastpath.frames": ("FrameBank", "FrameCatalog", "frame_rows", "frame_url", "to_openai_messages"),
    "training.tiny.fastpath.prompts": ("PromptCodec", "make_codec"),
    "training.tiny.fastpath.rollout": ("Episode", "RolloutSettings", "Turn", "force_reply", "new_episode", "play",
                                       "play_on", "solve_rate"),
}

__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = ["Episode", "FastQwen3VL", "FrameBank", "FrameCatalog", "PromptCodec", "RolloutSettings", "Turn", "collate",
           "force_reply", "frame_rows", "frame_url", "make_codec", "new_episode", "play", "play_on", "solve_rate",
           "to_openai_messages"]
