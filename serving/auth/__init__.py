"""API keys and what hangs on them: who is calling, per-key limits, usage, and the gate that applies them.

:class:`~serving.auth.keys.KeyRing` holds the hashed keys (reloaded within a TTL), read through
:mod:`~serving.auth.key_file` (a key file's text, read and validated, every failure an error of
the source); :func:`check_key_file` is the same reading offline (``maze-serve keys check``);
:mod:`~serving.auth.caller` is the request's caller (:data:`CALLER`) that the ingress checks a
model's scope against; :mod:`~serving.auth.key_limits` the per-key sliding-window limits (in
process or Redis); :mod:`~serving.auth.usage` usage per key and model; :class:`GateMiddleware` the
pure-ASGI middleware that runs them around every request. Uses only serving's config, errors and
metrics.
"""

from serving.auth.caller import CALLER, authorize_model, current, note_model, visible
from serving.auth.key_check import KeyFileCheck, check_key_file
from serving.auth.middleware import Gate, GateMiddleware
from serving.auth.usage import request_stream_usage, usage_of

__all__ = ["CALLER", "Gate", "GateMiddleware", "KeyFileCheck", "authorize_model", "check_key_file", "current",
           "note_model", "request_stream_usage", "usage_of", "visible"]
