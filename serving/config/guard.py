"""The live guard's policy (``adapters.guard``): how the gateway judges a running canary on the
outcomes of the sessions it served, and what it may do on its own (roll the canary back on evidence
of harm, promote it on evidence of benefit where the name allows). A default for every name,
overridable per name; set by whoever deploys the serving config, like the offline gate's policy."""

from __future__ import annotations

from pydantic import Field, ValidationError, field_validator, model_validator

from serving.config.base import NAME, SectionModel


class GuardPolicy(SectionModel):
    """One name's live guard: canary and stable session outcomes are paired as they arrive, and an
    anytime-valid test on the pairs where exactly one arm solved its maze may be read after every
    outcome; guard rails on errors and latency roll back a canary that breaks rather than loses."""

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
    pending_max: int = Field(1000, ge=1, description=(
        "outcomes of the busier arm kept waiting for a partner from the other; past it the oldest are dropped "
        "(a canary at a small share pairs each of its outcomes with the newest stable one)"))


class GuardSpec(SectionModel):
    """The live guard's policy for every adapter name, and per-name changes to it."""

    default: GuardPolicy = Field(default_factory=GuardPolicy, description="the policy of every name not in `names`")
    names: dict[str, dict] = Field(default_factory=dict, description=(
        "adapter name -> the fields of `default` it changes (e.g. {promote: true} for a name whose canaries may "
        "take over on their own)"))

    @field_validator("names")
    @classmethod
    def _names(cls, v: dict[str, dict]) -> dict[str, dict]:
        for name in v:
            if not NAME.match(name):
                raise ValueError(f"adapters.guard.names: {name!r} is not an adapter name")
        return v

    @model_validator(mode="after")
    def _each_name_valid(self) -> GuardSpec:
        for name in self.names:
            try:
                self.policy(name)
            except ValidationError as exc:
                why = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'policy'}: {e['msg']}" for e in exc.errors())
                raise ValueError(f"adapters.guard.names.{name}: {why}") from None
        return self

    def policy(self, name: str) -> GuardPolicy:
        """``name``'s policy: the default with the name's changes."""
        if name not in self.names:
            return self.default
        return GuardPolicy.model_validate({**self.default.model_dump(), **self.names[name]})


__all__ = ["GuardPolicy", "GuardSpec"]
