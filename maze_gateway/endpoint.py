"""What the frameworks' adapters ask a gateway before playing: the agent profile of the model.

The runner and ``maze-eval`` play a model with the protocol and history policy its base was trained
with, which the gateway reports per model in ``/v1/models`` (``agent_profile``); the Inspect task
and the verifiers environment do the same, so their episodes are the runner's.
"""

from __future__ import annotations

import logging

import httpx

from agent.protocol import DEFAULT_PROFILE, AgentProfile
from agent.runner import RunnerConfig

log = logging.getLogger(__name__)

__all__ = ["gateway_profile", "runner_config"]


async def gateway_profile(base_url: str, api_key: str | None, model: str) -> AgentProfile:
    """The agent profile the endpoint reports for ``model`` (or its base, ``base:adapter``) in
    ``/v1/models``; VisGym's defaults when it reports none (any OpenAI-compatible endpoint)."""
    base = model.partition(":")[0]
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with httpx.AsyncClient(timeout=30, headers=headers) as client:
            resp = await client.get(base_url.rstrip("/") + "/models")
        entries = resp.json().get("data", []) if resp.status_code == 200 else []
    except (httpx.HTTPError, ValueError) as exc:
        log.warning("%s/models could not be read (%s): playing with the default profile", base_url, exc)
        return DEFAULT_PROFILE
    for wanted in (model, base):
        for entry in entries:
            if entry.get("id") == wanted and isinstance(entry.get("agent_profile"), dict):
                return AgentProfile.from_dict(entry["agent_profile"])
    return DEFAULT_PROFILE


def runner_config(variant: str, profile: AgentProfile, *, protocol: str | None = None, history: str | None = None,
                  max_turns: int | None = None) -> RunnerConfig:
    """The runner's config for one episode: the profile's protocol and history unless overridden,
    the variant's turn limit unless ``max_turns`` is given. Sampling is the framework's."""
    return RunnerConfig(env_id=variant, protocol=protocol or profile.protocol, history=history or profile.history,
                        max_turns=max_turns, concurrency=1)
