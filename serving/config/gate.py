"""The offline gate's policy (``adapters.gate``): how ``maze-eval gate`` decides whether a candidate
version of a name replaces the version it serves. A default for every name, overridable per name;
set by whoever deploys the serving config (the gateway hands a name's policy to the gate through its
management routes, and the gate records the policy it used with every decision)."""

from __future__ import annotations

from typing import ClassVar

import re

from pydantic import Field, field_validator, model_validator

from serving.config.base import PerNamePolicies, SectionModel

_SEEDS = re.compile(r"^\s*\d+(\s*-\s*\d+)?\s*(,\s*\d+(\s*-\s*\d+)?\s*)*$")


def seed_list(text: str) -> list[int]:
    """``"0-63"`` or ``"1,5,9-12"`` as its seeds, in order (the gateway imports no agent code, so this
    reads the same form as ``agent.runner.parse_seeds`` on its own).

    Raises:
        ValueError: not that form, a range running backwards, or a seed given twice.
    """
    if not _SEEDS.match(text):
        raise ValueError(f"seeds must look like 0-63 or 1,5,9-12, got {text!r}")
    seeds: list[int] = []
    for part in text.split(","):
        first, _, last = (p.strip() for p in part.partition("-"))
        lo, hi = int(first), int(last or first)
        if hi < lo:
            raise ValueError(f"seed range {part.strip()!r} runs backwards")
        seeds.extend(range(lo, hi + 1))
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds {text!r} name a seed twice")
    return seeds


class GatePolicy(SectionModel):
    """One name's gate: both versions play the same seeds, looked at after each count of ``looks``; the
    candidate is promoted only when an exact one-sided test on the seeds exactly one of them solved
    finds it better, with a false-promotion rate of at most ``alpha`` over all looks."""

    alpha: float = Field(0.05, gt=0, lt=0.5, description=(
        "the most often the gate may promote a candidate that is no better than the version served (one-sided, "
        "over all looks together)"))
    seeds: str = Field("0-63", description=(
        "the fixed maze set both versions play, in the order the looks take it: the fixed 64 mazes by default; a "
        "larger set (e.g. 0-255) lets looks go past 64 seeds when a difference is still undecided"))
    looks: list[int] = Field(default_factory=lambda: [16, 32, 48, 64], description=(
        "seed counts at which the gate looks at the outcomes and may stop (promote, or leave the name on a "
        "worse candidate); the last is the most seeds it plays, and no more than `seeds` holds"))
    min_discordant: int = Field(6, ge=1, description=(
        "the fewest seeds where exactly one of the two versions solved the maze that a verdict needs, "
        "whatever the test says"))

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: str) -> str:
        seed_list(v)
        return v

    @field_validator("looks")
    @classmethod
    def _looks(cls, v: list[int]) -> list[int]:
        if not v or v[0] < 1 or any(b <= a for a, b in zip(v, v[1:])):
            raise ValueError(f"looks must be increasing seed counts of at least 1, got {v}")
        return v

    @model_validator(mode="after")
    def _enough_seeds(self) -> GatePolicy:
        if self.looks[-1] > len(seed_list(self.seeds)):
            raise ValueError(f"the last look plays {self.looks[-1]} seeds, but seeds {self.seeds!r} holds "
                             f"{len(seed_list(self.seeds))}")
        return self

    @property
    def seed_list(self) -> list[int]:
        """The seeds the gate plays, in order, up to its last look."""
        return seed_list(self.seeds)[: self.looks[-1]]


class GateSpec(PerNamePolicies):
    """The gate's policy for every adapter name, and per-name changes to it."""

    default: GatePolicy = Field(default_factory=GatePolicy, description="the policy of every name not in `names`")
    names: dict[str, dict] = Field(default_factory=dict, description=(
        "adapter name -> the fields of `default` it changes (e.g. {alpha: 0.01} for a name many teams call)"))

    section: ClassVar[str] = "adapters.gate"

    def policy(self, name: str) -> GatePolicy:
        """``name``'s policy: the default with the name's changes."""
        return super().policy(name)


__all__ = ["GatePolicy", "GateSpec", "seed_list"]
