"""maze-gateway serving: Ray Serve LLM on vLLM with LoRA adapters from S3, one typed config.

The package is laid out in rooms by concern: ``adapters/`` (the S3 store), ``auth/`` (keys,
limits, usage), ``ingress/`` (the HTTP side), ``placement/`` (adapters across replicas),
``engine/`` (the LLM replica), ``local/`` (the stacks on this machine) and ``cli/``
(``maze-serve``); ``config``, ``errors``, ``metrics``, ``app`` and ``k8s`` stay at the top.
"""

import importlib

from serving.config import ServingConfig, load_config

# Named, not imported: the rooms import this package first, and nothing that builds the app may
# reach the process manager (local/) through it.
_LAZY = {"serving.app": ("build_app",), "serving.local": ("ensure_embedded_gateway",)}


def lazy_exports(module: str, names_by_module: dict[str, tuple[str, ...]]):
    """A module ``__getattr__`` (PEP 562) that imports a name's module the first time the name is
    used: the faces name engine-bound classes without importing vLLM or Ray Serve LLM with the package."""
    home = {name: source for source, names in names_by_module.items() for name in names}

    def __getattr__(name: str):
        if name in home:
            return getattr(importlib.import_module(home[name]), name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


__getattr__ = lazy_exports(__name__, _LAZY)  # on first use: `import serving.config` stays light


__all__ = ["ServingConfig", "build_app", "ensure_embedded_gateway", "lazy_exports", "load_config"]
