"""Agent profiles: what a base model expects, read from its folder or a gateway listing."""

from __future__ import annotations

import json

import pytest

from agent.protocol import DEFAULT_PROFILE, AgentProfile, HistoryPolicy, load_profile


def test_profile_from_model_folder(tmp_path):
    (tmp_path / "agent_profile.json").write_text(json.dumps({"protocol": "keyword", "history": "window:3", "env_id": "x"}))
    p = load_profile(tmp_path)
    assert p.protocol == "keyword" and p.history == HistoryPolicy(kind="window", turns=3)
    assert p.to_dict() == {"protocol": "keyword", "history": "window:3"}


def test_missing_profile_is_visgym_default(tmp_path):
    assert load_profile(tmp_path) == DEFAULT_PROFILE and str(DEFAULT_PROFILE.history) == "full"


def test_bad_profile_is_an_error():
    with pytest.raises(ValueError, match="history policy"):
        AgentProfile.from_dict({"history": "sometimes"})
