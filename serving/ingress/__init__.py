"""The gateway's HTTP side: the ingress deployment, its middlewares, management routes and request checks.

:class:`~serving.ingress.gateway.GatewayIngress` (:data:`INGRESS_CLS_PATH`) is Ray Serve LLM's ``OpenAiIngress`` plus versioned adapters, keys,
``/v1/models``, ``/health`` and ``/ready``; :func:`create_app` its FastAPI app with
:mod:`~serving.ingress.middleware`'s middlewares, the management routes of
:mod:`~serving.ingress.management` and the config's extensions; :class:`ColocatedGateway` the same
ingress with its engine in one replica (``layout: colocated``), and :mod:`~serving.ingress.direct`
Serve's direct ingress for it. :func:`~serving.ingress.request_checks.check_request` runs on every engine route;
:mod:`~serving.ingress.adapter_metrics` counts per adapter version,
:mod:`~serving.ingress.replica_status` reads the replicas for ``/ready`` and
:mod:`~serving.ingress.server_timing` times every response (its ``Server-Timing`` header).
Everything that imports Ray Serve LLM's ingress (and so vLLM), or PIL, loads on first use.
"""

from typing import TYPE_CHECKING

from serving import lazy_exports
from serving.ingress.direct import direct_ingress_env, direct_proxy_port
from serving.ingress.server_timing import parse_header

if TYPE_CHECKING:
    from serving.ingress.colocated import ColocatedGateway, server_class
    from serving.ingress.gateway import ENDPOINTS, create_app

#: The ingress class's import path, as Ray Serve LLM's ``ingress_cls`` takes it.
INGRESS_CLS_PATH = "serving.ingress.gateway:GatewayIngress"
_LAZY = {"serving.ingress.gateway": ("ENDPOINTS", "create_app"),
         "serving.ingress.colocated": ("ColocatedGateway", "server_class")}

__getattr__ = lazy_exports(__name__, _LAZY)  # engine-bound names: imported on first use


__all__ = ["ENDPOINTS", "INGRESS_CLS_PATH", "ColocatedGateway", "create_app", "direct_ingress_env", "direct_proxy_port",
           "parse_header", "server_class"]
