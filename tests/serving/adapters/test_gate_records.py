"""The adapter store's side of the offline gate (``serving.adapters.gating``, ``AliasMoves.decide``),
on a real local S3 server and in a local folder: which candidate is cleared, the decision's one
conditional write (a promote only while the name serves the version it was played against), the
evidence checked, the history trimmed so gate entries never push out a rollback's target, the
policy per name (``adapters.gate``), and ``maze-serve adapters history`` showing the evidence."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from serving.adapters import AdapterStore, GateEvidence
from serving.adapters.refs import HISTORY_KEEP
from serving.cli import main
from serving.config import GateSpec, ServingConfig
from serving.errors import (
    AdapterNotFound,
    BadAdapterName,
    BadRequest,
    InvalidCanary,
    ParityFailed,
    ParityNotCompared,
    ParityNotMeasured,
)
from tests.serving.cli.test_adapters import config_file
from tests.support.adapter_store import make_adapter

PASSED = {"ok": True, "frames": 4, "max_abs_diff": 0.004, "reference": "hf+peft"}
FAILED = {"ok": False, "frames": 4, "max_abs_diff": 0.31, "reference": "hf+peft"}
NOT_COMPARED = {"ok": None, "frames": 4, "max_abs_diff": None, "reference": "base-differs"}


@pytest.fixture
def two(store, tmp_path):
    """(store, served, candidate): ``agent`` serves the first version; the second, pushed under it,
    passed its parity check."""
    served = store.push(make_adapter(tmp_path / "a", seed=1), "agent", base="maze-tiny").version
    cand = store.push(make_adapter(tmp_path / "b", seed=2), "agent", base="maze-tiny", force=True).version
    store.promote("agent", served)
    store.record_parity("agent", cand, PASSED)
    return store, served, cand


def evidence(against: str, verdict: str = "better", **kw) -> GateEvidence:
    fields = {"verdict": verdict, "against": against, "wins": 9, "losses": 1, "seeds": 32, "looks": "16/32/48/64",
              "p_value": 0.0107, "wins_needed": 9, "alpha": 0.05, "test": "exact one-sided binomial",
              "run": "gate-agent-cand", "run_against": "gate-agent-served"}
    return GateEvidence(**{**fields, **kw})


def test_a_cleared_candidate_comes_with_the_version_served_and_the_names_policy(two):
    store, served, cand = two
    target = store.gate_target("agent", cand)
    assert (target.version, target.current, target.base, target.parity) == (cand, served, "maze-tiny", "ok 0.004")
    assert target.policy.looks == [16, 32, 48, 64] and target.policy.alpha == 0.05
    strict = AdapterStore(store.spec.model_copy(update={"gate": GateSpec(names={"agent": {"alpha": 0.01}})}),
                          store.objects)
    assert strict.gate_target("agent", cand).policy.alpha == 0.01
    assert strict.gate_target("agent", cand).policy.looks == [16, 32, 48, 64]  # the default's other fields


def test_only_a_measured_passing_other_version_is_cleared(two, tmp_path):
    store, served, cand = two
    with pytest.raises(InvalidCanary, match="serves version"):
        store.gate_target("agent", served)
    unmeasured = store.push(make_adapter(tmp_path / "c", seed=3), "agent", base="maze-tiny", canary=1).canary.version
    with pytest.raises(ParityNotMeasured, match="no parity record"):
        store.gate_target("agent", unmeasured)  # a hand-made promote would let it through: the gate does not
    store.promote("agent", unmeasured)  # (as this shows)
    store.promote("agent", served)
    store.record_parity("agent", unmeasured, NOT_COMPARED)
    with pytest.raises(ParityNotCompared):
        store.gate_target("agent", unmeasured)
    lenient = AdapterStore(store.spec.model_copy(update={"parity_without_reference": True}), store.objects)
    assert lenient.gate_target("agent", unmeasured).parity == "not compared"
    store.record_parity("agent", cand, FAILED)
    with pytest.raises(ParityFailed):
        store.gate_target("agent", cand)


def test_a_better_verdict_promotes_with_its_evidence(two):
    store, served, cand = two
    ref, move = store.decide("agent", cand, evidence(served))
    assert ref.version == cand and move.action == "promote" and move.reason is None
    assert store.history("agent")[0] == move and move.gate == dataclasses.asdict(evidence(served))
    assert store.rollback("agent").version == served  # a gate's promote is a move like any other


@pytest.mark.parametrize("verdict", ["worse", "undecided"])
def test_other_verdicts_leave_the_alias_and_are_recorded(two, verdict):
    store, served, cand = two
    ref, move = store.decide("agent", cand, evidence(served, verdict))
    assert ref.version == served and (move.action, move.version, move.reason) == ("gate", cand, None)
    assert store.history("agent")[0].gate["verdict"] == verdict


def test_a_better_verdict_is_not_promoted_once_the_name_moved_or_the_parity_failed(two, tmp_path):
    store, served, cand = two
    other = store.push(make_adapter(tmp_path / "c", seed=3), "agent", base="maze-tiny", force=True).version
    ref, move = store.decide("agent", cand, evidence(served))  # played against `served`; `other` serves now
    assert ref.version == other and move.action == "gate"
    assert move.reason.startswith(f"not promoted: agent served {other} by the decision, not {served}")
    store.promote("agent", served)
    store.record_parity("agent", cand, FAILED)
    ref, move = store.decide("agent", cand, evidence(served))
    assert ref.version == served and move.reason == "not promoted: its parity is FAILED 0.31 now"


@pytest.mark.parametrize("change, words", [
    ({"verdict": "great"}, "verdict must be one of"),
    ({"against": "latest"}, "invalid adapter version"),
    ({"wins": -1}, "wins must be a count"),
    ({"wins": 30, "losses": 10}, "30 wins and 10 losses on 32 seeds"),
    ({"p_value": 1.5}, "p_value must be a probability"),
    ({"alpha": float("nan")}, "alpha must be a probability"),
    ({"run": "x" * 65}, "run must be a string of 1-64 characters"),
    ({"extra": 1}, "unknown fields ['extra']"),
])
def test_malformed_evidence_is_a_400_and_writes_nothing(two, change, words):
    store, served, cand = two
    before = store.history("agent")
    with pytest.raises((BadRequest, BadAdapterName), match=re.escape(words)) as err:
        store.decide("agent", cand, {**dataclasses.asdict(evidence(served)), **change})
    assert getattr(err.value, "status_code", None) == 400
    assert store.history("agent") == before


def test_a_candidate_is_pushed_without_serving_it(two, tmp_path):
    store, served, cand = two
    folder = make_adapter(tmp_path / "c", seed=3)
    pushed = store.push(folder, "agent", base="maze-tiny", candidate=True)
    assert pushed.version != served and store.resolve("agent").version == served  # the alias did not move
    assert (store.history("agent")[0].action, store.history("agent")[0].version) == ("candidate", pushed.version)
    store.record_parity("agent", pushed.version, PASSED)  # the history holds it: its parity can be kept
    assert store.gate_target("agent", pushed.version).current == served
    again = store.push(folder, "agent", base="maze-tiny", candidate=True)
    assert again.version == pushed.version and len([m for m in store.history("agent") if m.action == "candidate"]) == 1
    with pytest.raises(InvalidCanary, match="not both"):
        store.push(folder, "agent", candidate=True, canary=5)
    with pytest.raises(AdapterNotFound, match="not published yet"):
        store.push(folder, "other", candidate=True)


def test_gate_and_candidate_entries_never_push_out_the_moves_a_rollback_needs(two, tmp_path):
    store, served, cand = two
    for i in range(HISTORY_KEEP // 2 + 3):
        store.push(make_adapter(tmp_path / f"c{i}", seed=10 + i), "agent", base="maze-tiny", candidate=True)
        store.decide("agent", cand, evidence(served, "undecided"))
    history = store.history("agent")
    assert len(history) == HISTORY_KEEP and history[0].action == "gate"
    assert [m.action for m in history if m.action not in ("gate", "candidate")] == ["promote", "push", "push"]
    assert store.rollback("agent").version == cand


def test_the_gate_policy_is_checked_at_load():
    assert GateSpec(names={"agent": {"looks": [32, 64]}}).policy("agent").looks == [32, 64]
    assert GateSpec().policy("other").seed_list == list(range(64))
    wide = GateSpec(default={"seeds": "0-255", "looks": [16, 32, 48, 64, 128, 256]})
    assert wide.policy("x").seed_list == list(range(256))
    for bad, words in [({"names": {"agent": {"looks": [16, 128]}}}, "the last look plays 128 seeds"),
                       ({"names": {"agent": {"alhpa": 0.01}}}, "alhpa"),
                       ({"names": {"bad/name": {}}}, "not an adapter name"),
                       ({"default": {"looks": [32, 16]}}, "increasing"),
                       ({"default": {"seeds": "0-9,5"}}, "name a seed twice"),
                       ({"default": {"alpha": 0.5}}, "less than 0.5")]:
        with pytest.raises(ValidationError, match=words):
            GateSpec.model_validate(bad)
    shipped = ServingConfig.shipped("embedded")
    assert shipped.adapters.gate.policy("maze-grpo").min_discordant == 6


def test_history_shows_the_gates_evidence(s3_server, tmp_path):
    cfg = config_file(tmp_path, s3_server.url)
    store = AdapterStore(ServingConfig.from_file(cfg).adapters)
    store.ensure_bucket()
    served = store.push(make_adapter(tmp_path / "a", seed=1), "agent").version
    cand = store.push(make_adapter(tmp_path / "b", seed=2), "agent", force=True).version
    store.promote("agent", served)
    store.record_parity("agent", cand, PASSED)
    store.decide("agent", cand, evidence(served, "undecided", wins=4, losses=1, seeds=64, wins_needed=None,
                                        p_value=0.1875))
    run = lambda *a: CliRunner().invoke(main, ["-c", cfg, "adapters", *a])
    first = run("history", "agent").output.splitlines()[0].split("\t")
    assert first[:3] == [cand, first[1], "gate"]
    assert first[4] == (f"gate undecided vs {served}: 4 wins 1 losses on 64 seeds (needed -), one-sided p 0.188, "
                        "alpha 0.05 over looks 16/32/48/64; runs gate-agent-cand vs gate-agent-served")
    assert json.loads(run("history", "agent", "--json").output)[0]["gate"]["verdict"] == "undecided"
    pointer = run("gate", f"agent@{cand}")
    assert pointer.exit_code == 2 and f"maze-eval gate agent@{cand}" in pointer.output
    pushed = run("push", str(make_adapter(tmp_path / "c", seed=3)), "agent", "--candidate")
    assert pushed.exit_code == 0 and "as a candidate (not served); gate it: maze-eval gate agent@" in pushed.output
    assert store.resolve("agent").version == served and store.history("agent")[0].action == "candidate"
