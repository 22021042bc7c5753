"""Agent profiles: the prompt protocol and history policy a base model was trained with.

The runner, ``maze-eval`` and the gateway use a base model's profile by default so users never
have to remember it. A gateway reports it per model in ``/v1/models`` (``agent_profile``); a model
folder carries it as ``agent_profile.json``; unknown models get VisGym's defaults (tuple, full).
:class:`AgentProfile` is the one parser of a profile: the lab reads its model folders through it,
and the gateway's config (``serving.config.AgentProfileSpec``, which cannot import agent) only
checks the same shape, kept in step by ``tests/test_agent_profiles.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from agent.protocol.messages import HistoryPolicy

PROFILE_FILE = "agent_profile.json"


class AgentProfile(BaseModel):
    """How to talk to a model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    protocol: str = Field("tuple", description="prompt protocol name")
    history: HistoryPolicy = Field(default_factory=HistoryPolicy, description="history policy")

    @classmethod
    def from_dict(cls, data: dict) -> AgentProfile:
        """From a dict that may carry other keys too (a model folder's profile also names its env)."""
        data = {k: v for k, v in data.items() if k in cls.model_fields}
        if isinstance(data.get("history"), str):
            data["history"] = HistoryPolicy.parse(data["history"])
        return cls.model_validate(data)

    def to_dict(self) -> dict[str, str]:
        return {"protocol": self.protocol, "history": str(self.history)}


DEFAULT_PROFILE = AgentProfile()


def profile_data(model_dir: str | Path) -> dict | None:
    """A model folder's ``agent_profile.json`` as stored (it may name more than the profile, e.g. its
    env), or None when the folder has none."""
    path = Path(model_dir) / PROFILE_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def load_profile(model_dir: str | Path, default: AgentProfile = DEFAULT_PROFILE) -> AgentProfile:
    """The profile stored in a model folder, or ``default`` when it has none."""
    data = profile_data(model_dir)
    return default if data is None else AgentProfile.from_dict(data)
