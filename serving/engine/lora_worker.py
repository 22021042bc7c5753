"""The vLLM ``worker_extension_cls`` that puts :mod:`serving.engine.lora_kernels`'s grouped LoRA kernels into
the engine's worker process.

vLLM V1 runs the model in a worker process that the engine core spawns; the gateway's own
processes never touch it. vLLM resolves ``worker_extension_cls`` (an engine argument, set by
``serving.app`` when ``lora.cpu_kernels`` is ``grouped`` on a CPU device) in every worker before it
builds the model and its LoRA manager, so importing this module there is the hook: it points the
CPU platform's punica wrapper at :class:`serving.engine.lora_kernels.GroupedPunicaWrapperCPU`. No install step
or process-wide plugin is needed, and only engines configured this way are affected. The class
itself adds one collective RPC, ``lora_kernel_stats``, to check from outside that the kernels ran, to
the coverage RPCs of :class:`serving.engine.lora_coverage.LoraCoverageExtension` that every engine has.
"""

from __future__ import annotations

from typing import Any

from serving.compat import skip_eager_cpu_warmup
from serving.engine import lora_merge
from serving.engine.lora_coverage import LoraCoverageExtension
from serving.engine.lora_kernels import STATS, install

EXTENSION_QUALNAME = f"{__name__}.GroupedLoraWorkerExtension"

#: Whether the grouped kernels are installed in this process (False off the CPU platform).
INSTALLED = install()
# Before the worker builds its model: vLLM 0.26's CPU warm-up would run the tower's LoRA layers unmapped.
skip_eager_cpu_warmup()
#: Merged weights for single-adapter steps (serving.engine.lora_merge), when the engine env asks for them.
MERGED = lora_merge.install() if INSTALLED else None


class GroupedLoraWorkerExtension(LoraCoverageExtension):
    """Mixed into vLLM's worker class; ``lora_kernel_stats`` reports what the grouped kernels did."""

    def lora_kernel_stats(self) -> dict[str, Any]:
        from serving.compat import current_platform

        merged = MERGED.stats if MERGED is not None else {}
        return {"installed": INSTALLED, "punica_wrapper": current_platform.get_punica_wrapper(), **STATS,
                "merged_slots": MERGED.slots if MERGED is not None else 0, **merged}


__all__ = ["EXTENSION_QUALNAME", "INSTALLED", "MERGED", "GroupedLoraWorkerExtension"]
