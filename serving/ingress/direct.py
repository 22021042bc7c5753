"""Serve's direct ingress for the embedded stack (``ingress: direct``): client -> one replica.

With Serve's HTTP proxy a request is parsed by the proxy actor, sent to the replica as a Ray
actor call, and the response streamed back through the proxy: one more process and two more
serialisations per request. Ray 2.60's direct ingress (``RAY_SERVE_ENABLE_DIRECT_INGRESS=1``)
makes each *ingress* replica run its own uvicorn server on a port the controller hands out from
``RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT`` up to (excluding) ``..._MAX_HTTP_PORT``; that server
calls the replica's ASGI app in-process (same request context, metrics and route-prefix handling
as a proxied call).

What 2.60 still does, and how the embedded stack fits it:

* the controller starts a proxy on the head node anyway (it becomes the fallback target); it gets
  a spare port on the config's host (:func:`direct_proxy_port`) where it idles, so ``port`` stays free;
* the replica port range is pinned to exactly the config's ``port``: the one colocated replica
  listens where the proxy would have, so ``base_url`` does not change;
* a released port is quarantined (default: HAProxy's hard-stop + 30 s) and a stopping ingress
  replica drains for at least 30 s; with a one-port range a replacement replica (engine death,
  health check) would have to wait that long for the port, so both are cut to seconds here
  (replica replacement itself is not exercised by the tests).

The environment must reach the controller and the replicas, which read it when Ray Serve is
imported there: :mod:`serving.local.embedded` sets it on ``ray start``, whose workers inherit it.
"""

from __future__ import annotations

from serving.config import ServingConfig

# Seconds a stopping replica keeps serving its open connections before the port is released
# (Ray's default, 30, is meant for external load balancers noticing a replica is gone).
DRAIN_S = 2


def direct_ingress_env(cfg: ServingConfig) -> dict[str, str]:
    """Env for the Ray processes so that ``cfg``'s ingress replica serves HTTP on ``cfg.port``
    (for ``ingress: proxy`` only the switch, off, so a stray environment cannot override the config)."""
    if cfg.ingress != "direct":
        return {"RAY_SERVE_ENABLE_DIRECT_INGRESS": "0"}
    return {
        "RAY_SERVE_ENABLE_DIRECT_INGRESS": "1",
        # The allocator's range is range(MIN, MAX): MAX is exclusive.
        "RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT": str(cfg.port),
        "RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT": str(cfg.port + 1),
        "RAY_SERVE_PORT_QUARANTINE_S": "0",
        "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": str(DRAIN_S),
    }


def direct_proxy_port(cfg: ServingConfig, free_port) -> int:
    """The port Serve's proxy binds: the config's for ``proxy``; a spare one (``free_port()``) for
    ``direct``, where the replica owns the config's port and the proxy only idles as a fallback."""
    return free_port() if cfg.ingress == "direct" else cfg.port
