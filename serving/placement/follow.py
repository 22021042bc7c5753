"""A moved adapter name's new version, loaded where the name is in use before its first request.

After a push, promote, rollback or canary through a gateway's management route, the gateway whose
replica runs the engine too (the colocated layout) loads the versions the name now serves when it
holds a version of that name already (the name is in use there), so the first request for the new
version does not wait for its download, checks and registration. The load is the replica's own
(``GatewayLLMServer.ensure_resident``: the verified loader a request uses, with its integrity and
coverage checks), run in the background: a failure is logged and the request that follows meets it
again, so nothing is served that the loader did not accept.

It takes a slot only where that pushes out no other name in use: a free slot, or the adapter that
would go is a version of the same name, or has been idle :data:`IDLE_S`. Elsewhere (the standard
layout, whose engines are other replicas) the first request loads the version; a pinned name is
loaded by every replica's placement agent (``serving.placement.agent``) within ``PIN_REFRESH_S``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence

from serving.adapters import AdapterRef, ModelId
from serving.placement.replica import Replica

log = logging.getLogger(__name__)

IDLE_S = 60.0  # an adapter unused this long may make room for a moved name's new version
_LOADS: set[asyncio.Task] = set()  # running pre-loads (a task nobody references may be collected)


def successors(ref: AdapterRef, base: str, resident: Sequence[str], *, pinned: set[str], slots: int,
               last_used: Mapping[str, float], now: float) -> list[str]:
    """The ``base:name@version`` ids to load ahead for ``ref`` (pure) on a replica of ``base`` holding
    ``resident`` (least recently used first, as the replica's LRU orders them) in ``slots`` slots."""
    alias = ModelId(base, ref.name)

    def of_name(model_id: str) -> bool:  # a version of the moved name on this base
        parsed = ModelId.parse(model_id)
        return parsed.version is not None and parsed.unversioned == alias

    if ref.base not in (None, base) or not any(of_name(m) for m in resident):
        return []
    held, out = list(resident), []
    for model_id in [str(alias.at(v)) for v in (ref.version, *([ref.canary.version] if ref.canary else []))]:
        if model_id in held:
            continue
        if len(held) >= slots:
            victim = next((m for m in held if m not in pinned), None)
            if victim is None or not (of_name(victim) or now - last_used.get(victim, 0.0) >= IDLE_S):
                break
            held.remove(victim)
        held.append(model_id)
        out.append(model_id)
    return out


def preload_moved(server: Replica, ref: AdapterRef) -> list[str]:
    """Start loading the versions ``ref`` serves on ``server`` (a ``GatewayLLMServer``) where
    :func:`successors` says so; returns their ids (the loads run on)."""
    lru = getattr(server, "resident", None)
    if lru is None:  # outside a Serve replica: Ray's own LRU, nothing to read
        return []
    ids = successors(ref, server.base_model_id, list(lru.models), pinned=set(server.pinned_ids),
                     slots=lru.max_num_models_per_replica, last_used=dict(lru.last_used), now=time.time())
    if ids:
        task = asyncio.ensure_future(_load(server, ids))
        _LOADS.add(task)
        task.add_done_callback(_LOADS.discard)
    return ids


async def _load(server: Replica, ids: list[str]) -> None:
    for model_id in ids:
        try:
            await server.ensure_resident(model_id)
        except Exception:  # noqa: BLE001 - the first request loads it again and answers the failure
            log.warning("pre-loading %s failed; its first request loads it", model_id, exc_info=True)


__all__ = ["IDLE_S", "preload_moved", "successors"]
