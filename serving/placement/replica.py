"""What placement asks of an LLM replica: the contract between the placement loop and the engine.

The placement loop (:mod:`~serving.placement.agent`) and the colocated gateway's pre-load
(:mod:`~serving.placement.follow`) run beside a replica's engine and drive it: they read which
adapters it holds and which are pinned, load a version into it, and mark its report stale. They do
so through :class:`Replica` alone, so a replica class (today ``serving.engine.GatewayLLMServer``)
knows exactly what it owes placement, and placement never reaches into an engine's internals.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol


class ResidentAdapters(Protocol):
    """A replica's adapter slots (its LRU): the ``base:name@version`` ids it holds, least recently
    used first, when each was last used, how many slots it has and how many evictions it made."""

    models: OrderedDict
    last_used: dict[str, float]
    max_num_models_per_replica: int
    evictions: int


class Replica(Protocol):
    """An LLM replica as placement drives it.

    ``pinned_ids`` and ``placement_dirty`` are placement's to write: the versions the pins keep
    resident (never evicted), and whether the replica's report must be rewritten.
    """

    pinned_ids: set[str]
    placement_dirty: bool

    @property
    def resident(self) -> ResidentAdapters | None:
        """The adapters it holds (None where the replica keeps Ray's own LRU, outside Serve)."""

    @property
    def base_model_id(self) -> str:
        """The base model the replica serves."""

    @property
    def adapter_path(self) -> str | None:
        """The adapter store's prefix the replica loads from (None without LoRA)."""

    def placement_changed(self) -> None:
        """Mark the replica's report stale (its adapters or pins changed)."""

    async def ensure_resident(self, model_id: str) -> None:
        """Load ``base:name@version`` (download, checks, registration) unless it is held already."""


__all__ = ["Replica", "ResidentAdapters"]
