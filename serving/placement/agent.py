"""The LLM replica's side of adapter placement (serving.placement), run as a task of the replica.

Every second it looks whether its resident set changed; every ``PIN_REFRESH_S`` it reads the pins,
resolves each pinned name to the versions it serves (its alias and a running canary), loads those
it lacks, and keeps them out of eviction; it rewrites its report in the store when its adapters
changed, and at least every ``REPORT_INTERVAL_S`` (a heartbeat, so ``where`` can tell a live
replica's report from a lost one's). It also sets the replica's resident-adapter gauge. Store
failures are logged and retried on the next round: placement never fails a request.
"""

from __future__ import annotations

import asyncio
import logging
import time

from serving.adapters import AdapterStore, ModelId, spec_from_env
from serving.errors import ServingError
from serving.metrics import metric
from serving.placement.pins import PIN_REFRESH_S, REPORT_INTERVAL_S, PlacementStore
from serving.placement.replica import Replica

log = logging.getLogger(__name__)
TICK_S = 1.0


def _store(server: Replica) -> PlacementStore:
    return PlacementStore(AdapterStore(spec_from_env(server.adapter_path)))


def _identity() -> tuple[str, str]:
    from ray import serve
    from ray.util import get_node_ip_address

    return serve.get_replica_context().replica_id.unique_id, get_node_ip_address()


def pinned_model_ids(placement: PlacementStore, base: str) -> set[str]:
    """``base:name@version`` of every version a pinned name serves now (its alias, its canary)."""
    ids = set()
    for name in placement.pins():
        try:
            ref = placement.store.resolve(name)
        except ServingError:  # removed since it was pinned
            continue
        if ref.base in (None, base):
            alias = ModelId(base, name)
            ids.add(str(alias.at(ref.version)))
            if ref.canary is not None:
                ids.add(str(alias.at(ref.canary.version)))
    return ids


def report(server: Replica, node: str) -> dict:
    lru = server.resident
    resident = [{"id": m, "last_used": lru.last_used.get(m), "pinned": m in server.pinned_ids} for m in lru.models]
    return {"node": node, "base": server.base_model_id, "resident": resident,
            "slots": lru.max_num_models_per_replica, "evictions": lru.evictions}


async def _refresh_pins(server: Replica, placement: PlacementStore) -> None:
    base = server.base_model_id
    pinned = await asyncio.to_thread(pinned_model_ids, placement, base)
    if pinned != server.pinned_ids:
        server.pinned_ids = pinned
        server.placement_changed()
    for model_id in sorted(pinned - set(server.resident.models)):
        await server.ensure_resident(model_id)


async def run_placement(server: Replica) -> None:
    """The replica's placement loop (runs until the replica stops), driving it through :class:`Replica` alone."""
    placement = _store(server)
    replica, node = _identity()
    last_pins = last_report = 0.0
    while True:
        now = time.monotonic()
        try:
            if now - last_pins >= PIN_REFRESH_S:
                last_pins = now
                await _refresh_pins(server, placement)
            if server.placement_dirty or now - last_report >= REPORT_INTERVAL_S:
                server.placement_dirty, last_report = False, now
                rep = report(server, node)
                metric("resident").set(len(rep["resident"]), tags={"base": rep["base"]})
                await asyncio.to_thread(placement.write_report, replica, rep)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - S3 or a pinned adapter's load: next round
            log.warning("adapter placement round failed", exc_info=True)
            server.placement_dirty = True
        await asyncio.sleep(TICK_S)


__all__ = ["pinned_model_ids", "report", "run_placement"]
