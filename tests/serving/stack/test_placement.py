"""Adapter placement on the real embedded stack (vLLM engine, 8 adapter slots): a pinned adapter is
loaded without a request and survives the eviction of everything else; `where` tells which
adapters the replica holds; evictions are counted in the replica's report and its metrics."""

from __future__ import annotations

import httpx
import pytest

from serving.placement import PlacementStore, where_rows
from tests.support.waiting import wait_for

from tests.support.gateway_stack import image_messages

pytestmark = [pytest.mark.slow, pytest.mark.engine_seam]
PINNED = "maze-grpo"


def resident(placement: PlacementStore) -> dict[str, dict]:
    """The live replica's resident adapters (base:name@version -> where row)."""
    return {r["adapter"]: r for r in where_rows(placement.reports(), placement.pins()) if not r["stale"]}


def test_pinned_adapter_stays_while_the_others_are_evicted(stack):
    store = stack.store
    placement = PlacementStore(store)
    slots = stack.cfg.lora.adapters_per_replica
    names = [f"place-{i}" for i in range(slots)]  # with the pinned one: one more adapter than slots
    for name, folder in zip(names, stack.assets.extra, strict=True):
        stack.push(folder, name, force=True)
    pinned_id = f"{stack.base}:{PINNED}@{store.resolve(PINNED).version}"
    try:
        placement.pin(PINNED, slots)
        # Loaded by the replica itself (no request for it), and reported as pinned.
        held = wait_for(lambda: resident(placement).get(pinned_id, {}).get("pinned"), timeout=90, interval=1)
        assert held, resident(placement)
        evictions_before = max(r.get("evictions", 0) for r in placement.reports())
        for name in names:  # every slot's worth of other adapters, one request each
            resp = stack.client.chat.completions.create(model=f"{stack.base}:{name}", messages=image_messages(),
                                                        max_tokens=2, temperature=0)
            assert resp.model.startswith(f"{stack.base}:{name}@")

        last = f"{stack.base}:{names[-1]}@{store.resolve(names[-1]).version}"

        def settled():  # the report once it shows the last adapter asked for
            now = resident(placement)
            return now if last in now and pinned_id in now and len(now) == slots and all(
                now[k]["pinned"] == (k == pinned_id) for k in now) else None

        now = wait_for(settled, timeout=90, interval=1)
        assert now, resident(placement)
        evictions = max(r.get("evictions", 0) for r in placement.reports())
        print(f"\nresident after {len(names)} other adapters: {sorted(now)}; evictions {evictions_before} -> {evictions}")
        assert evictions > evictions_before  # the engine's slots were full: others went, the pinned one stayed
        assert now[pinned_id]["last_use_s"] is not None
        # An evicted adapter loads again on its next request.
        gone = next(n for n in names if not any(k.startswith(f"{stack.base}:{n}@") for k in now))
        resp = stack.client.chat.completions.create(model=f"{stack.base}:{gone}", messages=image_messages(),
                                                    max_tokens=2, temperature=0)
        assert resp.model.startswith(f"{stack.base}:{gone}@")
        # The replica's metrics (Ray's exporter, every few seconds): evictions and resident adapters.
        from serving.local import embedded

        url = embedded.status()["metrics_url"]

        def exported() -> bool:
            text = httpx.get(url, timeout=30).text
            return "ray_maze_gateway_adapter_evictions_total" in text and "ray_maze_gateway_adapters_resident" in text

        assert wait_for(exported, timeout=60, interval=3), "eviction and residency metrics not exported"
    finally:
        placement.unpin(PINNED)
        for name in names:
            store.remove(name)
