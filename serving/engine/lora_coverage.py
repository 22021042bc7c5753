"""What the engine applied of an adapter, as vLLM's own LoRA manager holds it.

vLLM loads every LoRA tensor of an adapter whose module *suffix* it knows (``q_proj``, ``qkv``, ...),
then applies only the modules its manager wrapped: with ``enable_tower_connector_lora`` off, the
vision tower and merger of a VLM are not wrapped, and a tensor under a prefix that names no module
of the base is wrapped nowhere. Both are left out with at most a log line, and the request is
answered by a model that is not the one trained. So the replica asks, once per adapter version:

* :class:`LoraCoverageExtension` is mixed into vLLM's worker (``worker_extension_cls``): it
  compares the registered adapter's modules with the manager's wrapped modules (after vLLM packed
  q/k/v and gate/up), in the worker process where both live. Once the replica has called its
  ``lora_coverage_install`` RPC at start, the worker makes that comparison inside every ``add_lora``
  and leaves the report in the adapter's folder (:data:`REPORT_FILE`), which the replica reads: the
  check rides on the registration instead of costing another round trip to the engine (a few
  milliseconds, most of what checking a small adapter would cost). The ``lora_coverage`` RPC asks
  the same question on its own, where no report was left;
* :func:`refusal` (replica side) turns that report into the reason to refuse the version, counting
  only modules whose weights are non-zero: a module left at peft's zero init changes nothing.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from serving.compat import registered_lora, worker_lora_manager

log = logging.getLogger(__name__)

COVERAGE_QUALNAME = f"{__name__}.LoraCoverageExtension"

#: The worker's coverage report of a registration, in the adapter's folder (the replica reads and removes it).
REPORT_FILE = ".engine-coverage.json"

# How a left-out module reads in an error, by the part of the model it is in.
GROUP_TEXT = {
    "vision_tower": "are in the vision tower and its merger, which this gateway does not apply",
    "language_model": "are in the language model but not wrapped by the engine",
    "unmatched": "name no module of the base",
}


def _group(name: str, mapping: Any) -> str:
    """``vision_tower`` (tower or connector), ``language_model`` or ``unmatched``, by vLLM's own prefixes."""
    if mapping is None:
        return "unmatched"
    if any(name.startswith(p) for p in [*mapping.connector, *mapping.tower_model]):
        return "vision_tower"
    if any(name.startswith(p) for p in mapping.language_model):
        return "language_model"
    return "unmatched"


def _is_zero(weights: Any) -> bool:
    parts = [weights.lora_a, weights.lora_b]
    flat = [t for p in parts for t in (p if isinstance(p, list | tuple) else [p]) if t is not None]
    return any(float(t.abs().max()) == 0.0 for t in flat) if flat else True


def coverage_of(manager: Any, lora_id: int) -> dict[str, Any]:
    """The registered adapter ``lora_id``'s modules that ``manager`` (vLLM's LoRAModelManager) left out."""
    lora = registered_lora(manager, lora_id)
    if lora is None:
        return {"registered": False}
    mapping = manager.mm_mapping if getattr(manager, "supports_mm", False) else None
    left_out = [{"module": name, "group": _group(name, mapping), "zero": _is_zero(w)}
                for name, w in lora.loras.items() if name not in manager.modules]
    return {"registered": True, "applied": len(lora.loras) - len(left_out), "left_out": left_out,
            "tower_lora": bool(getattr(manager, "supports_tower_connector_lora", False))}


def slot_memory(manager: Any) -> dict[str, Any]:
    """What ``manager``'s LoRA slots hold on the engine's device: the stacked A and B buffers of every
    module it wrapped, which vLLM allocates for ``max_loras`` adapters of ``max_lora_rank`` when it
    builds the model, whether or not an adapter is loaded. Bytes in all and MiB per slot."""
    seen: set[int] = set()
    total, device = 0, None
    for module in manager.modules.values():
        for name, value in vars(module).items():
            if not name.endswith("_stacked"):
                continue
            for t in value if isinstance(value, tuple | list) else (value,):
                if hasattr(t, "element_size") and t.numel() and t.data_ptr() not in seen:
                    seen.add(t.data_ptr())
                    total += t.numel() * t.element_size()
                    device = str(t.device)
    slots = int(getattr(manager, "lora_slots", 0) or 0)
    return {"slots": slots, "max_rank": int(manager.lora_config.max_lora_rank), "modules": len(manager.modules),
            "bytes": total, "per_slot_mib": round(total / slots / 2**20, 3) if slots else None, "device": device}


class LoraCoverageExtension:
    """Mixed into vLLM's worker class: RPCs that report what its LoRA manager applies."""

    def _lora_manager(self) -> Any:
        return worker_lora_manager(self)

    def lora_coverage(self, lora_id: int) -> dict[str, Any]:
        return coverage_of(self._lora_manager(), lora_id)

    def lora_slot_memory(self) -> dict[str, Any]:
        """:func:`slot_memory` of this worker's LoRA manager."""
        return slot_memory(self._lora_manager())

    def lora_coverage_install(self) -> bool:
        """Report coverage from inside every ``add_lora`` from now on; returns :meth:`lora_tower_support`.

        vLLM refuses an extension that defines a worker method, so the worker's ``add_lora`` is wrapped
        on the instance, where vLLM's RPC dispatch finds it first."""
        if "add_lora" not in self.__dict__:
            self.add_lora = _reporting_add_lora(self, self.add_lora)
        return self.lora_tower_support()

    def lora_tower_support(self) -> bool:
        """Whether the engine applies LoRA to the vision tower and connector (on and supported)."""
        return bool(getattr(self._lora_manager(), "supports_tower_connector_lora", False))


def _reporting_add_lora(worker: Any, stock: Any) -> Any:
    def add_lora(lora_request: Any) -> bool:
        added = stock(lora_request)
        start = time.perf_counter()
        report = coverage_of(worker._lora_manager(), lora_request.lora_int_id)
        report["coverage_s"] = time.perf_counter() - start
        path = Path(lora_request.lora_path) / REPORT_FILE
        try:
            path.with_suffix(".part").write_text(json.dumps(report))
            os.replace(path.with_suffix(".part"), path)
        except OSError:  # the replica then asks through the lora_coverage RPC
            log.warning("could not leave the LoRA coverage report in %s", path, exc_info=True)
        return added

    return add_lora


def take_report(folder: str) -> dict[str, Any] | None:
    """The coverage report the worker left in ``folder`` at registration (removed once read), or None."""
    path = Path(folder) / REPORT_FILE
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    path.unlink(missing_ok=True)
    return report


def module_count(folder: str) -> int:
    """LoRA modules in an adapter folder's weights (tensor names only: a header read)."""
    from safetensors import safe_open

    with safe_open(f"{folder}/adapter_model.safetensors", framework="numpy") as fh:
        return len({k.split(".lora_")[0] for k in fh.keys() if ".lora_" in k})


def refusal(report: dict[str, Any], adapter: str, total: int | Callable[[], int]) -> str | None:
    """Why ``adapter`` (with ``total`` LoRA modules in its files) must not be served, or None.

    Modules left out with all-zero weights are not counted: leaving them out changes nothing.
    ``total`` may be a function (e.g. a header read of the weights), called only for a refusal.
    """
    if not report.get("registered"):
        return f"the engine did not register adapter {adapter!r}"
    lost = [m for m in report["left_out"] if not m["zero"]]
    if not lost:
        return None
    parts, total = [], total() if callable(total) else total
    for group, text in GROUP_TEXT.items():
        names = [m["module"] for m in lost if m["group"] == group]
        if names:
            examples = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
            parts.append(f"{len(names)} of {total} LoRA modules {text} ({examples})")
    hint = ("set lora.vision_tower: true in the serving config or retrain without them"
            if any(m["group"] == "vision_tower" for m in lost) and not report.get("tower_lora")
            else "re-export the adapter with the base model's module names")
    return f"adapter {adapter!r} would be served without part of its weights: {'; '.join(parts)}; {hint}"


__all__ = ["COVERAGE_QUALNAME", "GROUP_TEXT", "REPORT_FILE", "LoraCoverageExtension", "coverage_of", "module_count",
           "refusal", "slot_memory", "take_report"]
