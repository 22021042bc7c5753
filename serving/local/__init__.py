"""The gateway on this machine: the embedded stack and a local multi-node cluster, all on loopback.

:mod:`~serving.local.embedded` runs local S3, a Ray head and the app on 127.0.0.1 (``maze-serve
up``, and ``maze-eval`` with no endpoint through :func:`ensure_embedded_gateway`);
:mod:`~serving.local.cluster` the production layout over several Ray nodes on 127.0.0.x
(``maze-serve cluster``); :mod:`~serving.local.processes` the process helpers both use and
:mod:`~serving.local.ports` free loopback ports. Only the CLI and callers that start a stack
import this room: nothing that builds the app does.
"""

from serving.local import cluster, embedded
from serving.local.embedded import ensure_embedded_gateway
from serving.local.ports import free_port, free_ports

__all__ = ["cluster", "embedded", "ensure_embedded_gateway", "free_port", "free_ports"]
