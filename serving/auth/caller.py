"""The caller of the request being served: its key's principal and the model that served it.

The key gate (:mod:`serving.auth.middleware`) sets :data:`CALLER` for each keyed request; the
ingress and the management routes read it to answer a model outside the key's scope with
OpenAI's 404, to list only what the key may call, and to label usage with the model served.
"""

from __future__ import annotations

import asyncio
import contextvars
from dataclasses import dataclass

from serving.auth.keys import Principal
from serving.errors import ModelAccessDenied


@dataclass
class Caller:
    """The principal of one request, and the model it was served by (the usage label: ``base`` or
    ``base:name`` once the gateway resolved it, so label values are bounded by what is published)."""

    principal: Principal
    model: str | None = None
    # What of a stream's usage the gateway asked the engine for and the client did not: taken out
    # before it reaches the client (serving.auth.usage.request_stream_usage).
    hide_chunk_usage: bool = False  # every chunk's usage (continuous usage stats)
    hide_final_usage: bool = False  # the usage-only last chunk
    # Counting the prompt's tokens with the engine's tokenizer, started by the ingress when the client
    # left before the response started (a JSON answer, a stream's first chunk): what the gate charges
    # then. A task of its own, so the request's unwinding neither waits for it nor cancels it.
    prompt_count: asyncio.Task | None = None


CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("maze_caller", default=None)


def current() -> Principal | None:
    """The principal of the request being served (None with auth off)."""
    caller = CALLER.get()
    return caller.principal if caller is not None else None


def visible(model: str) -> bool:
    """Whether the caller may see ``model`` (always, with auth off)."""
    principal = current()
    return principal is None or principal.may_call(model)


def authorize_model(model: str) -> None:
    """Raise OpenAI's 404 for a model outside the caller's scope."""
    if not visible(model):
        raise ModelAccessDenied.of(model)


def note_model(model: str) -> None:
    """Record the model the request is served by (``base`` or ``base:name``) for usage."""
    caller = CALLER.get()
    if caller is not None:
        caller.model = model


__all__ = ["CALLER", "Caller", "authorize_model", "current", "note_model", "visible"]
