"""API keys and what hangs on them: who is calling, per-key limits, usage, and the gate that applies them.

:class:`~serving.auth.keys.KeyRing` holds the hashed keys (reloaded within a TTL); :mod:`~serving.auth.caller` is the
request's caller (:data:`CALLER`) that the ingress checks a model's scope against;
:mod:`~serving.auth.key_limits` the per-key sliding-window limits (in process or Redis);
:mod:`~serving.auth.usage` usage per key and model; :class:`GateMiddleware` the pure-ASGI
middleware that runs them around every request. Uses only serving's config, errors and metrics.
"""

from serving.auth.caller import CALLER, authorize_model, current, note_model, visible
from serving.auth.middleware import Gate, GateMiddleware
from serving.auth.usage import request_stream_usage, usage_of

__all__ = ["CALLER", "Gate", "GateMiddleware", "authorize_model", "current", "note_model", "request_stream_usage",
           "usage_of", "visible"]
