"""The fixed maze frames parity is measured on: turn-1 conversations of the agent runner, shipped as
``frames.json`` (written by ``evaluation.parity_frames``, which has the agent's env and prompts)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

FRAMES_FILE = Path(__file__).with_name("frames.json")


@functools.cache
def parity_frames() -> tuple[list[dict[str, Any]], ...]:
    """One chat conversation (OpenAI message list, the image as a data: URL) per fixed maze."""
    return tuple(json.loads(FRAMES_FILE.read_text())["conversations"])


__all__ = ["FRAMES_FILE", "parity_frames"]
