"""The live guard's policy (``adapters.guard``): how the gateway judges a running canary on the
outcomes of the sessions it served, and what it may do on its own (roll the canary back on evidence
of harm, promote it on evidence of benefit where the name allows). A default for every name,
overridable per name; set by whoever deploys the serving config, like the offline gate's policy."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from serving.config.base import PerNamePolicies, SectionModel


class GuardPolicy(SectionModel):
    """One name's live guard: canary and stable sessions are paired by the time they started (each
    outcome carries its session's duration), and an anytime-valid test on the pairs where exactly one
    arm solved its maze may be read after every outcome; guard rails on errors and latency roll back a
    canary that breaks rather than loses."""

    enabled: bool = Field(True, description=(
        "judge this name's canaries on the session outcomes clients report (POST /v1/outcomes); off: outcomes "
        "are accepted and not counted"))
    alpha_rollback: float = Field(0.05, gt=0, lt=0.5, description=(
        "the most often the guard may roll back a canary that is no worse than the stable version, over the "
        "canary's whole life (the test may be read after every outcome)"))
    alpha_promote: float = Field(0.05, gt=0, lt=0.5, description=(
        "the most often the guard may find a canary better when it is no better (promotion needs `promote`)"))
    promote: bool = Field(False, description=(
        "promote a canary the test finds better, so it serves every session; off: the finding is recorded and "
        "the canary keeps its share until someone promotes it (a promotion moves every user, so a name opts in)"))
    min_discordant: int = Field(6, ge=1, description=(
        "the fewest pairs where exactly one arm solved its maze that a verdict needs, whatever the test says"))
    rails_min_sessions: int = Field(20, ge=1, description=(
        "sessions each arm needs before the error and latency guard rails are read"))
    max_error_increase: float = Field(0.05, ge=0, le=1, description=(
        "a canary whose share of sessions ending on an endpoint error exceeds the stable version's by more than "
        "this is rolled back"))
    max_latency_ratio: float = Field(2.0, gt=1, description=(
        "a canary whose mean turn latency is more than this many times the stable version's is rolled back"))
    horizon_s: float = Field(600.0, gt=0, description=(
        "seconds after a session started before it is paired: the longest a session may run and still count in a "
        "pair. Sessions are paired by when they started, once every session that started with them has ended "
        "(pairing by when they end would favour the arm whose quick wins come in first); a verdict comes this "
        "much after the outcomes that support it"))
    pending_max: int = Field(1000, ge=1, description=(
        "sessions kept waiting for a partner from the other arm; past it the oldest are dropped (a canary at a "
        "small share pairs each of its sessions with the stable one that started nearest to it)"))


class GuardSpec(PerNamePolicies):
    """The live guard's policy for every adapter name, and per-name changes to it."""

    default: GuardPolicy = Field(default_factory=GuardPolicy, description="the policy of every name not in `names`")
    names: dict[str, dict] = Field(default_factory=dict, description=(
        "adapter name -> the fields of `default` it changes (e.g. {promote: true} for a name whose canaries may "
        "take over on their own)"))

    section: ClassVar[str] = "adapters.guard"

    def policy(self, name: str) -> GuardPolicy:
        """``name``'s policy: the default with the name's changes."""
        return super().policy(name)


__all__ = ["GuardPolicy", "GuardSpec"]
