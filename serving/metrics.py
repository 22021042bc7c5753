"""Gateway metrics, exported through Ray's metrics agent next to Ray Serve's and vLLM's own.

``ray.util.metrics`` instruments are created lazily in the process that records them (the
ingress replica, or an LLM server replica for adapter loads) and scraped from Ray's Prometheus
endpoint, where Ray prefixes every name with ``ray_``. docs/metrics.md lists every name.
"""

from __future__ import annotations

import functools
import logging

log = logging.getLogger(__name__)

LATENCY_BOUNDS_S = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120]


class _Noop:
    def inc(self, *a, **k) -> None: ...

    def observe(self, *a, **k) -> None: ...

    def set(self, *a, **k) -> None: ...


@functools.cache
def _instruments() -> dict:
    try:
        from ray.util.metrics import Counter, Gauge, Histogram
    except ImportError:  # outside Ray (unit tests): metrics are no-ops
        return {}
    return {
        "requests": Counter("maze_gateway_requests", "HTTP requests by route and status",
                            tag_keys=("route", "status")),
        "latency": Histogram("maze_gateway_request_latency_seconds", "HTTP request latency until the last byte",
                             boundaries=LATENCY_BOUNDS_S, tag_keys=("route",)),
        # A stream's latency to the last byte is its length; to the response's start it is the time to
        # its first chunk, the wait a client feels (also the Server-Timing header's `total`).
        "response_start": Histogram("maze_gateway_response_start_latency_seconds",
                                    "HTTP request latency until the response starts (a stream's first chunk)",
                                    boundaries=LATENCY_BOUNDS_S, tag_keys=("route",)),
        "resolutions": Counter("maze_gateway_adapter_resolutions",
                               "adapter name -> version resolutions by result (hit, miss, not_found, unavailable)",
                               tag_keys=("result",)),
        "resolve_latency": Histogram("maze_gateway_adapter_resolve_latency_seconds",
                                     "S3 read time of an adapter resolution (cache misses only)",
                                     boundaries=LATENCY_BOUNDS_S),
        "loads": Counter("maze_gateway_adapter_loads", "adapter downloads into a replica by result (ok, error)",
                         tag_keys=("result", "adapter", "version")),
        "load_latency": Histogram("maze_gateway_adapter_load_latency_seconds",
                                  "adapter download + verification time in a replica", boundaries=LATENCY_BOUNDS_S,
                                  tag_keys=("adapter", "version")),
        "refusals": Counter("maze_gateway_adapter_refusals",
                            "adapter versions a replica refused to serve, by reason (integrity: files that do not "
                            "hash to the version; incomplete: files missing or not loadable; not_applied: trained "
                            "modules the engine would leave out)", tag_keys=("adapter", "version", "reason")),
        # A counter of seconds, not a histogram: Ray exports a histogram's sum from its buckets, too coarse
        # for phases of a few milliseconds (benchmarks/load_checks.py reads these per version).
        "load_seconds": Counter("maze_gateway_adapter_load_seconds",
                                "seconds of an adapter version's cold load in a replica, by phase (download: fetch and "
                                "completeness check; integrity: the files hashed against the version; register: "
                                "vLLM's registration; coverage: the engine's report of what it applied)",
                                tag_keys=("adapter", "version", "phase")),
        # Placement (serving.engine.llm_server, serving.placement.agent): per replica through Ray's WorkerId label.
        "evictions": Counter("maze_gateway_adapter_evictions",
                             "adapters evicted from a replica (least recently used, never a pinned one)",
                             tag_keys=("adapter", "version")),
        "resident": Gauge("maze_gateway_adapters_resident", "adapters resident in a replica", tag_keys=("base",)),
        # Per adapter version (serving.ingress.adapter_metrics): labels are published adapters only.
        "adapter_requests": Counter("maze_gateway_adapter_requests",
                                    "engine requests per adapter version by HTTP status",
                                    tag_keys=("base", "adapter", "version", "status")),
        "adapter_latency": Histogram("maze_gateway_adapter_request_latency_seconds",
                                     "engine request latency per adapter version, until the last byte",
                                     boundaries=LATENCY_BOUNDS_S, tag_keys=("base", "adapter", "version")),
        "adapter_tokens": Counter("maze_gateway_adapter_tokens",
                                  "prompt and completion tokens per adapter version (from the response's usage)",
                                  tag_keys=("base", "adapter", "version", "kind")),
        # Canary decisions (serving.adapters.canary): which arm each request of a name under a canary took.
        "canary_routes": Counter("maze_gateway_canary_routes",
                                 "requests of an adapter name under a canary, by the version and arm (stable, canary) "
                                 "that served them", tag_keys=("adapter", "version", "arm")),
        # Per API key (serving.auth.usage): the key's tenant name and the model the gateway resolved.
        # The live guard (serving.guard): outcomes reported per session, and the decisions they led to.
        "guard_outcomes": Counter("maze_gateway_guard_outcomes",
                                  "session outcomes reported to the live guard, by the arm they counted for (canary, "
                                  "stable; none when not counted) and result (counted, not_counted)",
                                  tag_keys=("adapter", "arm", "result")),
        "guard_decisions": Counter("maze_gateway_guard_decisions",
                                   "the live guard's decisions on canaries: rollback, promote, better (found better, "
                                   "promotion left to a person)", tag_keys=("adapter", "decision")),
        "key_requests": Counter("maze_gateway_key_requests",
                                "requests per API key and model by HTTP status (429: refused by the key's limits)",
                                tag_keys=("key", "model", "status")),
        "key_tokens": Counter("maze_gateway_key_tokens",
                              "prompt and completion tokens per API key and model (from the response's usage)",
                              tag_keys=("key", "model", "kind")),
        "limit_store_errors": Counter("maze_gateway_limit_store_errors",
                                      "failed calls to the shared limit store by action (admit, finish, usage)",
                                      tag_keys=("action",)),
        "key_source_errors": Counter("maze_gateway_key_source_errors",
                                     "failed reads of an API key source (auth.keys_file, auth.keys_env) by reason "
                                     "(missing, unreadable, changed, encoding, empty, yaml, invalid, error)",
                                     tag_keys=("reason",)),
    }


def metric(name: str):
    """The named instrument, or a no-op when Ray's metrics are unavailable."""
    try:
        return _instruments().get(name) or _Noop()
    except Exception:
        log.debug("metrics unavailable", exc_info=True)
        return _Noop()


def route_of(path: str) -> str:
    """Low-cardinality route label (adapter names and ids never become label values)."""
    for known in ("/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/episodes", "/v1/outcomes", "/v1/leaderboard",
                  "/v1/usage", "/v1/adapters", "/health", "/ready"):
        if path == known or path.startswith(known + "/"):
            return known
    return "other"
