"""Chat messages of a turn and which earlier turns the model sees again.

The runner, the lab and the framework adapters build every message with :func:`user_message` and
:func:`assistant_message` (OpenAI's chat format, the frame as a PNG data: URL), and a
:class:`HistoryPolicy` decides which earlier turns are sent back to the model.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from agent.maze import png_data_url

Message = dict[str, Any]


def user_message(text: str, frame: np.ndarray | None = None, image_url: str | None = None) -> Message:
    """One user message: the text part first, then the image as a data: URL part."""
    url = image_url if image_url is not None else (png_data_url(frame) if frame is not None else None)
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if url is not None:
        content.append({"type": "image_url", "image_url": {"url": url}})
    return {"role": "user", "content": content}


def assistant_message(text: str) -> Message:
    return {"role": "assistant", "content": text}


class HistoryPolicy(BaseModel):
    """Which earlier turns the model sees.

    ``full`` sends the whole conversation (what SkyRL trains with). ``window`` sends the last
    ``turns`` earlier turns plus the current one; once turn 1 drops out of the window its
    instruction text is put in front of the oldest kept user message, so the rules are never lost.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["full", "window"] = Field("full", description="full conversation or a sliding window")
    turns: int = Field(0, ge=0, description="earlier turns kept by the window policy")

    @classmethod
    def parse(cls, spec: str | HistoryPolicy) -> HistoryPolicy:
        """From ``"full"`` or ``"window:K"`` (``"last:K"`` is accepted as an alias)."""
        if isinstance(spec, HistoryPolicy):
            return spec
        kind, _, k = spec.partition(":")
        if kind == "full" and not k:
            return cls(kind="full")
        if kind in ("window", "last") and k.isdigit():
            return cls(kind="window", turns=int(k))
        raise ValueError(f"history policy must be 'full' or 'window:K', got {spec!r}")

    def __str__(self) -> str:
        return "full" if self.kind == "full" else f"window:{self.turns}"

    def select(self, conversation: list[Message]) -> list[Message]:
        """The messages to send, from the whole conversation ``[U1, A1, ..., Ut]``."""
        if self.kind == "full":
            return conversation
        keep = 2 * self.turns + 1
        if len(conversation) <= keep:
            return conversation
        window = conversation[-keep:]
        instructions = conversation[0]["content"][0]
        first = dict(window[0])
        first["content"] = [{"type": "text", "text": instructions["text"] + "\n\n"}, *window[0]["content"]]
        return [first, *window[1:]]
