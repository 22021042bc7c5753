"""The live guard's keeper (serving.guard.watch) on a real local S3 server and in a local folder: an
outcome counts only for the running canary, from a session the split sends to the version it names;
a worse canary is rolled back by one conditional move that records the evidence; a better one is
promoted where the policy allows, else the finding is recorded; the ledger lives in the store, so a
new keeper (a restarted gateway) carries on; concurrent reports all count."""

from __future__ import annotations

import time

import pytest

from serving.adapters import serves_canary
from serving.config import GuardSpec
from serving.errors import BadRequest
from serving.guard import CanaryGuard, Outcome
from tests.support.adapter_store import make_adapter
from tests.support.threads import run_together

PASSED = {"ok": True, "frames": 4, "max_abs_diff": 0.004, "reference": "hf+peft"}
H = 0.2  # the horizon: each report below ran that long, so it is paired as it comes in
WON, LOST = Outcome(solved=True, duration_s=H), Outcome(solved=False, duration_s=H)
SPEC = GuardSpec(names={"agent": {"horizon_s": H}})


@pytest.fixture
def canary(store, tmp_path):
    """(store, stable, canary): ``agent`` serves its first version, the second runs as a 50% canary."""
    stable = store.push(make_adapter(tmp_path / "a", seed=1), "agent", base="maze-tiny").version
    cand = store.push(make_adapter(tmp_path / "b", seed=2), "agent", base="maze-tiny", force=True).version
    store.promote("agent", stable)
    store.record_parity("agent", cand, PASSED)
    store.canary("agent", cand, 50)
    time.sleep(H + 0.1)  # every session reported below started after the canary (the ledger pairs only those)
    return store, stable, cand


def sessions(store, arm: str, count: int, start: int = 0) -> list[str]:
    """``count`` session keys the split sends to ``arm``."""
    running = store.resolve("agent").canary
    keys = (f"episode-{i}" for i in range(start, 10_000))
    return [k for k in keys if serves_canary("agent", running, k) == (arm == "canary")][:count]


def play(guard, stable, cand, store, pairs, start=0, canary_outcome=LOST, stable_outcome=WON):
    """``pairs`` stable then canary reports: what became of the last."""
    for s, c in zip(sessions(store, "stable", pairs, start), sessions(store, "canary", pairs, start)):
        guard.report(f"maze-tiny:agent@{stable}", s, stable_outcome)
        last = guard.report(f"maze-tiny:agent@{cand}", c, canary_outcome)
    return last


def test_only_outcomes_of_the_split_count(canary):
    store, stable, cand = canary
    guard = CanaryGuard(store, SPEC)
    (on_canary,), (on_stable,) = sessions(store, "canary", 1), sessions(store, "stable", 1)
    assert guard.report(f"maze-tiny:agent@{cand}", on_canary, WON).counted
    again = guard.report(f"maze-tiny:agent@{cand}", on_canary, WON)
    assert not again.counted and "counted already" in again.reason
    wrong_arm = guard.report(f"maze-tiny:agent@{cand}", on_stable, WON)
    assert not wrong_arm.counted and "sends this session to the other version" in wrong_arm.reason
    other = guard.report("maze-tiny:agent@" + "0" * 12, on_canary, WON)
    assert not other.counted and "neither" in other.reason
    with pytest.raises(BadRequest, match="names no adapter version"):
        guard.report("maze-tiny:agent", on_canary, WON)
    off = CanaryGuard(store, GuardSpec(names={"agent": {"enabled": False}}))
    assert "off for 'agent'" in off.report(f"maze-tiny:agent@{stable}", on_stable, WON).reason
    ledger = guard.ledger("agent")
    assert ledger["evidence"]["canary_sessions"] == 1 and ledger["evidence"]["stable_sessions"] == 0


def test_a_worse_canary_is_rolled_back_with_its_evidence_and_a_restart_carries_on(canary):
    store, stable, cand = canary
    ref_canary = store.resolve("agent").canary
    play(CanaryGuard(store, SPEC), stable, cand, store, 4)
    last = play(CanaryGuard(store, SPEC), stable, cand, store, 3, start=200)  # a new keeper: same ledger
    assert last.decision == "rollback" and last.arm == "canary"
    ref = store.resolve("agent")
    assert ref.canary is None and ref.version == stable
    move = store.history("agent")[0]
    assert move.action == "abort" and move.version == cand and "lost 7 and won 0" in move.reason
    assert move.guard["losses"] == 7 and move.guard["e_worse"] >= 20 and move.guard["alpha_rollback"] == 0.05
    # a report that reached the same verdict at once, or a restart that finds it again, moves nothing
    assert store.guard_decision("agent", ref_canary, "rollback", move.reason, move.guard) is None
    ledger = CanaryGuard(store, SPEC).ledger("agent")
    assert ledger["verdict"]["action"] == "rollback" and ledger["verdict"]["outcome"] == "abort"
    late = CanaryGuard(store, SPEC).report(f"maze-tiny:agent@{cand}", "late", LOST)
    assert not late.counted and "runs no canary" in late.reason


def test_a_better_canary_is_promoted_only_where_the_policy_allows(canary):
    store, stable, cand = canary
    found = play(CanaryGuard(store, SPEC), stable, cand, store, 7, canary_outcome=WON, stable_outcome=LOST)
    assert found.decision == "better"
    assert store.resolve("agent").canary.version == cand  # left to a person
    entry = store.history("agent")[0]
    assert entry.action == "guard" and "leaves promotion to a person" in entry.reason
    # a second report reaching the same finding at once records nothing more
    running = store.resolve("agent").canary
    assert store.guard_decision("agent", running, "better", entry.reason, entry.guard) is None
    assert [m.action for m in store.history("agent")].count("guard") == 1
    promoting = CanaryGuard(store, GuardSpec(names={"agent": {"horizon_s": H, "promote": True}}))
    (on_stable,) = sessions(store, "stable", 1, start=300)
    done = promoting.report(f"maze-tiny:agent@{stable}", on_stable, LOST)  # the next outcome reads the verdict
    assert done.decision == "promote"
    ref = store.resolve("agent")
    assert ref.version == cand and ref.canary is None
    assert store.history("agent")[0].action == "promote" and store.history("agent")[0].guard["wins"] == 7


def test_concurrent_reports_all_count(canary):
    store, stable, cand = canary
    guard = CanaryGuard(store, SPEC)
    keys = sessions(store, "stable", 12)
    results: list = []
    assert run_together([lambda k=k: results.append(guard.report(f"maze-tiny:agent@{stable}", k, WON))
                         for k in keys]) == []
    assert len(results) == 12 and all(r.counted for r in results)  # none gave up on a lost race
    assert guard.ledger("agent")["evidence"]["stable_sessions"] == 12  # conditional writes: none lost


def test_the_cli_shows_the_guard_and_its_move_in_the_history(s3_server, tmp_path):
    from click.testing import CliRunner

    from serving.adapters import AdapterStore
    from serving.cli import main
    from serving.config import ServingConfig
    from tests.serving.cli.test_adapters import config_file

    cfg = config_file(tmp_path, s3_server.url)
    store = AdapterStore(ServingConfig.from_file(cfg).adapters)
    store.ensure_bucket()
    stable = store.push(make_adapter(tmp_path / "a", seed=1), "agent", base="maze-tiny").version
    cand = store.push(make_adapter(tmp_path / "b", seed=2), "agent", base="maze-tiny", force=True).version
    store.promote("agent", stable)
    store.record_parity("agent", cand, PASSED)
    run = lambda *a: CliRunner().invoke(main, ["-c", cfg, "adapters", *a])  # noqa: E731
    store.canary("agent", cand, 50)
    time.sleep(H + 0.1)
    assert "no canary judged yet" in run("guard", "agent").output
    play(CanaryGuard(store, SPEC), stable, cand, store, 7)
    shown = run("guard", "agent")
    assert shown.exit_code == 0, shown.output
    assert "0/7 solved against 7/7" in shown.output and "rollback: the canary solves fewer mazes" in shown.output
    history = run("history", "agent").output.splitlines()
    assert history[0].startswith(f"{cand}\t") and "\tabort\t" in history[0]
    assert "guard vs " + stable in history[0] and "0 wins 7 losses" in history[0]
    assert run("guard", "nobody").exit_code != 0
    changed = run("policy", "agent", "--guard", "promote=true", "--guard", "alpha_promote=0.01", "--gate", "alpha=0.02")
    assert changed.exit_code == 0, changed.output
    assert "promote=True" in changed.output and "(changed here: alpha_promote, promote)" in changed.output
    assert store.policy("agent", "gate").alpha == 0.02
    assert run("policy", "agent", "--guard", "promote").exit_code == 2  # KEY=VALUE
    bad = run("policy", "agent", "--guard", "alpha_promote=2")
    assert bad.exit_code != 0 and "alpha_promote" in bad.output
    assert run("policy", "agent", "--reset", "guard").exit_code == 0 and store.policy("agent", "guard").promote is False


def test_a_names_own_policy_changes_apply_are_checked_and_recorded(canary, s3_server, tmp_path):
    store, stable, cand = canary
    assert store.policy("agent", "guard").promote is False
    with pytest.raises(BadRequest, match="guard policy: promot"):
        store.set_policy("agent", "guard", {"promot": True})
    with pytest.raises(BadRequest, match="alpha_rollback: Input should be less than 0.5"):
        store.set_policy("agent", "guard", {"alpha_rollback": 0.9})
    with pytest.raises(BadRequest, match="policy kind 'other'"):
        store.set_policy("agent", "other", {})
    assert store.set_policy("agent", "guard", {"promote": True, "horizon_s": H}, by="ops").promote is True
    entry = store.history("agent")[0]
    assert (entry.action, entry.by) == ("policy", "ops") and "guard policy: horizon_s=0.2, promote=True" in entry.reason
    store.promote("agent", stable)  # a move keeps the name's own changes
    assert store.policy("agent", "guard").promote is True and store.policy("agent", "gate").alpha == 0.05
    # the live guard reads them: a better canary is promoted by itself now
    store.canary("agent", cand, 50)
    time.sleep(H + 0.1)
    play(CanaryGuard(store, GuardSpec()), stable, cand, store, 7, canary_outcome=WON, stable_outcome=LOST)
    assert store.resolve("agent").version == cand
    store.set_policy("agent", "guard", {})
    assert store.policy("agent", "guard").promote is False and store.policy_view("agent")["changes"]["guard"] == {}
