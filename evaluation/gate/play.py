"""The offline gate's run: the candidate and the version a name serves, played on the same mazes
look by look, the test's verdict, and the decision recorded.

1. The store is asked first (:class:`~evaluation.gate.aliases.GateAliases`): the candidate must be
   another version of the name with a parity record that passes; nothing is played otherwise. The
   answer names the version served now and the name's policy (``adapters.gate``: alpha, looks, seeds).
2. Both versions are evaluated through the gateway, each pinned by version (``base:name@version``),
   so a move of the alias while the gate runs changes nothing it measures. Each is one run of the
   results store that grows look by look (``Store.extend_seeds`` then a resume), complete on the
   seeds played at every look; the two play at once, each with half the concurrency.
3. At each look the seeds only the candidate solved (wins) and only the served version solved
   (losses) are tested (:mod:`~evaluation.gate.sequential`); the gate stops at the first verdict.
4. The decision goes to the store (:meth:`GateAliases.decide`): a candidate found better is promoted
   only while the name still serves the version it was played against; otherwise the name is left and
   its history records the decision and why. The results store keeps it too, for ``maze-eval compare``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, Field

from agent.cli import EXIT_INCOMPLETE
from agent.runner import is_scored
from evaluation.config import EvalConfig
from evaluation.errors import EvalError
from evaluation.evaluate import evaluate_async, resolve_endpoint
from evaluation.gate.aliases import GateAliases, GatewayAliases
from evaluation.gate.sequential import Design, Look, judge
from evaluation.store import Store
from serving.adapters import GateEvidence, GateTarget, ModelId

log = logging.getLogger(__name__)


class GateIncomplete(EvalError):
    """Episodes of a look errored after their retries: the look cannot be judged, nothing is decided."""

    exit_code = EXIT_INCOMPLETE


class LookRecord(BaseModel):
    """One look: seeds played by then, wins and losses among them, the wins a promotion needed (None:
    none could), the one-sided exact p-value of the wins, and what the look decided."""

    seeds: int
    wins: int
    losses: int
    wins_needed: int | None
    p_value: float
    verdict: Literal["better", "worse", "undecided", "continue"]


class GateResult(BaseModel):
    """What a gate found and did."""

    name: str = Field(description="the adapter name")
    base: str = Field(description="the base model both versions were played on")
    version: str = Field(description="the candidate version")
    against: str = Field(description="the version the name served when the gate started")
    verdict: Literal["better", "worse", "undecided"] = Field(description="the test's verdict on the candidate")
    promoted: bool = Field(description="whether the name now serves the candidate")
    reason: str | None = Field(None, description="why a candidate found better was not promoted")
    wins: int = Field(description="seeds only the candidate solved, at the deciding look")
    losses: int = Field(description="seeds only the version served solved, at the deciding look")
    seeds: int = Field(description="seeds both versions played")
    p_value: float = Field(description="one-sided exact p-value of the wins at the deciding look")
    alpha: float = Field(description="the policy's false-promotion rate")
    test: str = Field(description="the test, in words")
    looks: list[LookRecord] = Field(description="every look taken, in order")
    run: str = Field(description="the candidate's evaluation run")
    run_against: str = Field(description="the served version's evaluation run")
    move: dict[str, Any] = Field(description="the entry the decision made in the name's history")


OnLook = Callable[[LookRecord], Any]


def design_of(target: GateTarget) -> Design:
    """The test of ``target``'s policy."""
    p = target.policy
    return Design(alpha=p.alpha, looks=tuple(p.looks), min_discordant=p.min_discordant)


def evidence_of(design: Design, target: GateTarget, look: Look, runs: tuple[str, str]) -> GateEvidence:
    """The deciding look as the evidence the store records."""
    return GateEvidence(verdict=look.verdict, against=target.current, wins=look.wins, losses=look.losses,
                        seeds=look.seeds, looks="/".join(map(str, design.looks)), p_value=look.p_value,
                        wins_needed=look.wins_needed, alpha=design.alpha, test=design.label, run=runs[0],
                        run_against=runs[1])


class _Runs:
    """The two versions' runs, grown look by look."""

    def __init__(self, cfg: EvalConfig, store: Store, target: GateTarget, base: str):
        self.store, self.target = store, target
        half = max(1, cfg.concurrency // 2)
        self.cfgs = {v: cfg.model_copy(update={"base": base, "adapter": str(ModelId(None, target.name, v)),
                                               "concurrency": half, "samples": 1,
                                               "run_name": f"gate {ModelId(None, target.name, v)}"})
                     for v in (target.version, target.current)}
        self.ids: dict[str, str] = {}

    async def play(self, seeds: list[int]) -> dict[str, dict[int, bool]]:
        """Both versions on ``seeds``; each version's first-sample outcome per seed."""
        results = await asyncio.gather(*(self._play(v, seeds) for v in self.cfgs))
        incomplete = [r for r in results if r.status != "complete"]
        if incomplete:
            raise GateIncomplete(
                f"{sum(r.summary.errors for r in incomplete)} episodes errored after their retries in run(s) "
                f"{', '.join(r.run_id for r in incomplete)}: the look cannot be judged and nothing was decided; "
                "run the gate again once the endpoint answers")
        return {v: await asyncio.to_thread(self._outcomes, self.ids[v]) for v in self.cfgs}

    async def _play(self, version: str, seeds: list[int]):
        cfg = self.cfgs[version].model_copy(update={"seeds": seeds})
        run_id = self.ids.get(version)
        if run_id is not None:
            await asyncio.to_thread(self.store.extend_seeds, run_id, seeds)
        result = await evaluate_async(cfg, resume=run_id)
        self.ids[version] = result.run_id
        return result

    def _outcomes(self, run_id: str) -> dict[int, bool]:
        rows = self.store.episode_rows(run_id)
        return {r["seed"]: bool(r["success"]) for r in rows if r["sample"] == 0 and is_scored(r["stop_reason"])}


async def gate_async(cfg: EvalConfig, target: str, *, aliases: GateAliases | None = None,
                     on_look: OnLook | None = None) -> GateResult:
    """Gate ``target`` (``NAME@VERSION``) against the version the name serves: play, test, decide.

    ``cfg`` says how to play (endpoint, key, env, sampling, concurrency, results store); its adapter,
    seeds and samples are the gate's. ``aliases`` is where the store is asked (default: the endpoint's
    management routes). ``on_look`` sees each look as it is judged, before the decision is recorded.

    Raises:
        EvalError: ``target`` names no version, or ``cfg`` asks for several samples per seed.
        ParityNotPassed (and the store's other refusals): before anything is played.
        GateIncomplete: a look's episodes errored after their retries (nothing decided).
        EndpointUnavailable: the endpoint or its management routes do not answer.
    """
    wanted = ModelId.adapter(target)
    if wanted.version is None:
        raise EvalError(f"{target!r} names no version: gate NAME@VERSION (a version of NAME pushed before)")
    if cfg.samples != 1:
        raise EvalError("the gate pairs one episode per seed and version: samples must be 1")
    endpoint = await resolve_endpoint(cfg)
    cfg = cfg.model_copy(update={"endpoint": endpoint})
    aliases = aliases if aliases is not None else GatewayAliases(endpoint, cfg.api_key, timeout_s=cfg.timeout_s)
    found = await aliases.target(wanted.name, wanted.version)
    design, seeds = design_of(found), found.policy.seed_list
    log.info("gate %s@%s against %s: %s", found.name, found.version, found.current, design.label)
    store = await asyncio.to_thread(Store, cfg.db)
    try:
        runs = _Runs(cfg, store, found, cfg.base or found.base or "")
        looks, discordant = [], []
        for count in design.looks:
            outcomes = await runs.play(seeds[:count])
            cand, cur = outcomes[found.version], outcomes[found.current]
            wins = sum(cand[s] and not cur[s] for s in seeds[:count])
            losses = sum(cur[s] and not cand[s] for s in seeds[:count])
            discordant.append(wins + losses)
            look = judge(design, discordant, wins, losses)
            looks.append(LookRecord(**{k: v for k, v in dataclasses.asdict(look).items() if k != "index"}))
            if on_look is not None:
                on_look(looks[-1])
            if look.verdict != "continue":
                break
        return await _decide(aliases, store, found, design, look, looks,
                             (runs.ids[found.version], runs.ids[found.current]), runs.cfgs[found.version].base)
    finally:
        store.close()


async def _decide(aliases: GateAliases, store: Store, target: GateTarget, design: Design, look: Look,
                  looks: list[LookRecord], runs: tuple[str, str], base: str | None) -> GateResult:
    """Record the deciding ``look`` in the adapter store, then in the results store."""
    evidence = evidence_of(design, target, look, runs)
    move = await aliases.decide(target.name, target.version, evidence)
    result = GateResult(name=target.name, base=base or "", version=target.version, against=target.current,
                        verdict=look.verdict, promoted=move.get("action") == "promote", reason=move.get("reason"),
                        wins=look.wins, losses=look.losses, seeds=look.seeds, p_value=look.p_value,
                        alpha=design.alpha, test=design.label, looks=looks, run=runs[0], run_against=runs[1],
                        move=move)
    await asyncio.to_thread(store.add_gate_decision, adapter=target.name, version=target.version,
                            against=target.current, run_id=runs[0], against_run_id=runs[1], verdict=result.verdict,
                            promoted=result.promoted, evidence=result.model_dump(mode="json"))
    return result


def gate(cfg: EvalConfig, target: str, **kwargs) -> GateResult:
    """Synchronous shell over :func:`gate_async`."""
    return asyncio.run(gate_async(cfg, target, **kwargs))


__all__ = ["GateIncomplete", "GateResult", "LookRecord", "design_of", "evidence_of", "gate", "gate_async"]
