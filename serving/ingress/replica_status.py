"""Replicas of the gateway's LLM deployments as the Serve controller sees them, for ``/ready``.

A health check through a deployment handle reaches one replica: with two replicas and one lost
(its node gone), it still answers, so readiness alone would not show the lost capacity. The
controller knows each deployment's target and which replicas run where; ``/ready`` reports it
and says ``degraded`` while fewer replicas run than the target (still 200: the gateway serves).
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

LLM_DEPLOYMENT_PREFIX = "GatewayLLMServer"  # Ray Serve LLM names the deployment "<server class>:<model id>"


def summarize_replicas(details: dict[str, Any], app: str) -> dict[str, dict[str, Any]]:
    """Per LLM deployment of ``app``: running replicas, the target, replicas by state, the nodes the
    running ones are on and which replica runs on which node (pure: ``details`` is the controller's
    ``get_serve_details()``)."""
    deployments = details.get("applications", {}).get(app, {}).get("deployments", {})
    out = {}
    for name, d in sorted(deployments.items()):
        if not name.startswith(LLM_DEPLOYMENT_PREFIX):
            continue
        replicas = d.get("replicas", [])
        running = [r for r in replicas if r.get("state") == "RUNNING"]
        states: dict[str, int] = {}
        for r in replicas:
            states[r.get("state", "?")] = states.get(r.get("state", "?"), 0) + 1
        out[name] = {"running": len(running), "target": int(d.get("target_num_replicas", 0)), "states": states,
                     "nodes": sorted({r.get("node_id") or "" for r in running}),
                     "placement": {r.get("replica_id", "?"): r.get("node_id") or "" for r in running}}
    return out


def degraded(replicas: dict[str, dict[str, Any]]) -> bool:
    """Whether any LLM deployment runs fewer replicas than its target."""
    return any(r["running"] < r["target"] for r in replicas.values())


def replica_status(app: str) -> dict[str, dict[str, Any]] | None:
    """:func:`summarize_replicas` for ``app`` from the running controller (blocking: call it in a
    thread); None when the controller cannot be asked."""
    try:
        # Serve's public status() omits the target replica count; the client's details hold it.
        from serving.compat import serve_controller_client

        return summarize_replicas(serve_controller_client().get_serve_details(), app)
    except Exception:  # readiness must answer even when the controller does not
        log.warning("replica status unavailable", exc_info=True)
        return None


__all__ = ["degraded", "replica_status", "summarize_replicas"]
