"""API keys and what hangs on them: who is calling, per-key limits, usage, and the gate that applies them.

:class:`KeyRing` holds the hashed keys (reloaded within a TTL); :mod:`~serving.auth.caller` is the
request's caller (:data:`CALLER`) that the ingress checks a model's scope against;
:mod:`~serving.auth.key_limits` the per-key sliding-window limits (in process or Redis);
:mod:`~serving.auth.usage` usage per key and model; :class:`GateMiddleware` the pure-ASGI
middleware that runs them around every request. Uses only serving's config, errors and metrics.
"""

from serving.auth.caller import CALLER, Caller, authorize_model, current, note_model, visible
from serving.auth.key_limits import Decision, LocalLimiter, RedisLimiter, make_limiter
from serving.auth.keys import (
    ADMIN_ACTIONS,
    PUBLISH_ACTIONS,
    KeyRing,
    KeySourceError,
    Principal,
    digest,
    parse_key_file,
)
from serving.auth.middleware import OPEN_PATHS, Gate, GateMiddleware
from serving.auth.usage import LocalUsage, RedisUsage, make_usage, request_stream_usage, usage_of

__all__ = ["ADMIN_ACTIONS", "CALLER", "OPEN_PATHS", "PUBLISH_ACTIONS", "Caller", "Decision", "Gate", "GateMiddleware",
           "KeyRing", "KeySourceError", "LocalLimiter", "LocalUsage", "Principal", "RedisLimiter", "RedisUsage",
           "authorize_model", "current", "digest", "make_limiter", "make_usage", "note_model", "parse_key_file",
           "request_stream_usage", "usage_of", "visible"]
