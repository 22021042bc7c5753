"""The gateway's profile check (serving.config.AgentProfileSpec, which imports no agent code) and
the one profile parser (agent.protocol.AgentProfile) agree: whatever a gateway's config accepts,
and so reports in /v1/models, the agent parses to the same profile, with the same defaults."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agent.protocol import DEFAULT_PROFILE, AgentProfile
from serving.config import CONFIG_DIR, AgentProfileSpec, load_config

PROTOCOLS = ["tuple", "keyword", "tuple/v1", "keyword/v1", "tuple/v2", "other", ""]
HISTORIES = ["full", "window:0", "window:2", "window:15", "last:2", "window:", "window:-1", "window:x", "window",
             "sometimes", "FULL", ""]


def _spec(protocol: str, history: str) -> dict | None:
    try:
        return AgentProfileSpec(protocol=protocol, history=history).model_dump()
    except ValidationError:
        return None


def _agent(protocol: str, history: str) -> dict | None:
    try:
        return AgentProfile.from_dict({"protocol": protocol, "history": history}).to_dict()
    except ValueError:
        return None


def test_the_defaults_are_the_same():
    assert AgentProfileSpec().model_dump() == DEFAULT_PROFILE.to_dict()


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("history", HISTORIES)
def test_what_the_gateway_accepts_the_agent_parses_to_the_same_profile(protocol, history):
    served = _spec(protocol, history)
    if served is not None:
        assert _agent(protocol, history) == served
    if _agent(protocol, history) is None:  # what the parser refuses, the gateway's config refuses too
        assert served is None


def test_both_refuse_a_bad_history_and_accept_the_shipped_shapes():
    assert _spec("tuple", "sometimes") is None and _agent("tuple", "sometimes") is None
    assert _spec("keyword", "window:3") == _agent("keyword", "window:3") == {"protocol": "keyword", "history": "window:3"}


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_config_reports_a_profile_the_agent_reads(path):
    for base in load_config(path).base_models:
        assert AgentProfile.from_dict(base.agent_profile.model_dump()).to_dict() == base.agent_profile.model_dump()
