"""Adapter placement state shared through the adapter store: pinned names, and where each replica's
adapters are.

Layout under the store's prefix, beside ``_refs`` (adapter names cannot start with ``_``)::

    _placement/pins.json                 {"pins": {name: {"at": iso time}}}: replaced by conditional
                                         writes, like a ref
    _placement/replicas/{replica}.json   one LLM replica's report: its node, its resident adapters
                                         (``base:name@version``, last use, pinned or not), loads,
                                         evictions, cold-load seconds; rewritten as it changes

A pinned name is kept resident on every replica: each replica reads the pins every
:data:`PIN_REFRESH_S`, loads the version the name serves (and its canary's) where it lacks it, and
never evicts it. Pins are bounded so that every replica keeps a slot for the names that are not
pinned. The reports are what ``maze-serve adapters where`` reads: the store is the one place every
replica (on any node) and every operator can reach; a report older than :data:`REPORT_STALE_S`
belongs to a replica that stopped reporting (lost with its node) and is shown as stale.
"""

from __future__ import annotations

import time
from typing import Any

from serving.adapters import AdapterStore, ModelId, check_name, now
from serving.errors import NotPinned, TooManyPins

PLACEMENT = "_placement"
PIN_REFRESH_S = 10.0
REPORT_INTERVAL_S = 30.0  # a replica's report is rewritten at least this often (its heartbeat)
REPORT_STALE_S = 120.0


class PlacementStore:
    """Pins and replica reports beside the adapter store's refs, through its door scoped to
    ``_placement/`` (store failures as the door maps them)."""

    def __init__(self, store: AdapterStore):
        self.store = store
        self.objects = store.objects.scoped(f"{PLACEMENT}/")

    # -- pins ------------------------------------------------------------------------------
    def pins(self) -> dict[str, dict[str, Any]]:
        """Pinned names -> when they were pinned."""
        doc, _ = self.objects.read_json("pins.json")
        return dict((doc or {}).get("pins", {}))

    def _update_pins(self, change) -> dict[str, dict[str, Any]]:
        """Replace the pins with ``change(pins)`` in one conditional write, as a ref is replaced."""
        doc = self.objects.replace_json("pins.json", lambda doc: {"pins": change(dict((doc or {}).get("pins", {})))},
                                        "the pins")
        return doc["pins"]

    def pin(self, name: str, slots: int) -> dict[str, dict[str, Any]]:
        """Pin published adapter ``name``; at most ``slots - 1`` names (``slots``: adapters per replica)."""
        self.store.resolve(check_name(name))  # AdapterNotFound unless published

        def change(pins):
            if name not in pins and len(pins) + 1 >= slots:
                raise TooManyPins(f"cannot pin {name!r}: {len(pins)} of the {slots} adapter slots per replica are "
                                  f"pinned ({', '.join(sorted(pins))}) and one must stay free for the others; "
                                  "unpin one or raise lora.adapters_per_replica")
            return {**pins, name: pins.get(name, {"at": now()})}

        return self._update_pins(change)

    def unpin(self, name: str) -> dict[str, dict[str, Any]]:
        check_name(name)

        def change(pins):
            if name not in pins:
                raise NotPinned(f"adapter {name!r} is not pinned; pinned: {sorted(pins) or 'none'}")
            return {k: v for k, v in pins.items() if k != name}

        return self._update_pins(change)

    # -- replica reports -------------------------------------------------------------------
    def write_report(self, replica: str, report: dict[str, Any]) -> None:
        self.objects.put_json(f"replicas/{replica}.json", {**report, "replica": replica, "updated_at": time.time()})

    def remove_report(self, replica: str) -> None:
        self.objects.delete(f"replicas/{replica}.json")

    def reports(self, now: float | None = None) -> list[dict[str, Any]]:
        """Every replica's latest report, with ``stale`` set on those older than REPORT_STALE_S."""
        now = time.time() if now is None else now
        out = []
        for key in self.objects.list("replicas/"):
            doc, _ = self.objects.read_json(key)
            if doc is not None:
                out.append({**doc, "stale": now - float(doc.get("updated_at", 0)) > REPORT_STALE_S})
        return sorted(out, key=lambda d: (d.get("node", ""), d["replica"]))


def where_rows(reports: list[dict[str, Any]], pins: dict[str, Any], now: float | None = None) -> list[dict[str, Any]]:
    """One row per (replica, resident adapter), for ``maze-serve adapters where`` (pure)."""
    now = time.time() if now is None else now
    rows = []
    for rep in reports:
        for a in rep.get("resident", []):
            name = ModelId.parse(a["id"]).name
            rows.append({"replica": rep["replica"], "node": rep.get("node", ""), "adapter": a["id"],
                         "last_use_s": None if a.get("last_used") is None else round(now - a["last_used"], 1),
                         "pinned": name in pins, "stale": rep.get("stale", False)})
    return rows


__all__ = ["PIN_REFRESH_S", "REPORT_STALE_S", "PlacementStore", "where_rows"]
