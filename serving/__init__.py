"""maze-gateway serving: Ray Serve LLM on vLLM with LoRA adapters from S3, one typed config.

The package is laid out in rooms by concern: ``adapters/`` (the S3 store), ``auth/`` (keys,
limits, usage), ``ingress/`` (the HTTP side), ``placement/`` (adapters across replicas),
``engine/`` (the LLM replica), ``local/`` (the stacks on this machine) and ``cli/``
(``maze-serve``); ``config``, ``errors``, ``metrics``, ``app`` and ``k8s`` stay at the top.
"""

import importlib
from typing import TYPE_CHECKING

from serving.config import ServingConfig, load_config

if TYPE_CHECKING:
    from serving.app import build_app
    from serving.local import ensure_embedded_gateway

_LAZY = {"build_app": "serving.app", "ensure_embedded_gateway": "serving.local"}


def __getattr__(name: str):
    if name in _LAZY:  # on first use: `import serving.config` stays light
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ServingConfig", "build_app", "ensure_embedded_gateway", "load_config"]
