"""The LLM replica and what its engine runs with: LoRA loading, CPU LoRA kernels, cores and allocator.

:class:`GatewayLLMServer` is Ray Serve LLM's ``server_cls``: verified adapter downloads, one
registration per adapter, the per-replica adapter LRU with pins (:class:`~serving.engine.llm_server.PinnedLRU`).
:mod:`~serving.engine.lora_kernels` are grouped-by-adapter LoRA kernels for vLLM's CPU backend,
installed by the worker extension :mod:`~serving.engine.lora_worker`;
:mod:`~serving.engine.lora_merge` runs a step of one adapter's rows on merged weights;
:mod:`~serving.engine.lora_coverage` asks the engine which of an adapter's modules it applied;
:mod:`~serving.engine.cpu_affinity` splits the cores between the engine's worker and everything
else; :mod:`~serving.engine.allocator` picks the engine processes' malloc;
:mod:`~serving.engine.replica_timing` is the replica's part of the ``Server-Timing`` header. The
engine-bound classes import vLLM on first use; building the app names them by their import paths.
"""

from typing import TYPE_CHECKING

from serving import lazy_exports
from serving.engine import replica_timing
from serving.engine.allocator import allocator_env, describe_allocator
from serving.engine.cpu_affinity import pin_session, plan_core_split
from serving.engine.lora_merge import SLOTS_ENV as MERGED_SLOTS_ENV  # engine env: slots with merged weights

if TYPE_CHECKING:
    from serving.engine.llm_server import GatewayLLMServer

#: Ray Serve LLM's ``server_cls`` for every base model: the replica class's import path.
SERVER_CLS_PATH = "serving.engine.llm_server:GatewayLLMServer"
#: vLLM's ``worker_extension_cls`` that installs the grouped CPU LoRA kernels (a dotted path).
WORKER_EXTENSION_PATH = "serving.engine.lora_worker.GroupedLoraWorkerExtension"
#: The ``worker_extension_cls`` of engines without them: only the coverage report (what LoRA applied).
COVERAGE_EXTENSION_PATH = "serving.engine.lora_coverage.LoraCoverageExtension"
_LAZY = {"serving.engine.llm_server": ("GatewayLLMServer",)}

__getattr__ = lazy_exports(__name__, _LAZY)  # engine-bound names: imported on first use


__all__ = ["COVERAGE_EXTENSION_PATH", "MERGED_SLOTS_ENV", "SERVER_CLS_PATH", "WORKER_EXTENSION_PATH", "GatewayLLMServer",
           "allocator_env", "describe_allocator", "pin_session", "plan_core_split", "replica_timing"]
