"""The offline gate end to end without the stack: ``maze-eval gate`` against a gateway stand-in
(tests/support/gate_server.py: the gateway's real management routes over a real adapter store in a
local folder, scripted OpenAI routes that serve the store's versions and fail the mazes each test
chooses), a real SQLite results store.

Covered: a better candidate promoted with its evidence in the name's history and in ``maze-eval
compare``; a worse one and an undecided one left; a candidate without passed parity refused before
any episode; a move of the name during the gate making the promotion fail (recorded, not made); the
same decisions through the store itself (``StoreAliases``) and through the CLI's exit codes.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner

from evaluation import EvalConfig, Store, compare
from evaluation.cli import main as cli
from evaluation.gate import Design, StoreAliases, gate, judge
from serving.adapters import AdapterStore
from serving.config import AdapterStoreSpec
from serving.errors import ParityFailed, ParityNotMeasured
from tests.support.adapter_store import make_adapter
from tests.support.gate_server import GateServer, serving

NAME = "agent"
ALL = range(64)


def parity(store: AdapterStore, version: str, ok: bool | None = True) -> None:
    store.record_parity(NAME, version, {"ok": ok, "frames": 4, "max_abs_diff": 0.004 if ok else 0.3,
                                        "reference": "hf+peft", "at": datetime.now(UTC).isoformat()})


@pytest.fixture
def env(tmp_path):
    """(server state, endpoint, store, [served, candidate, other], results db): NAME serves the first
    version; the other two were pushed under it and measured at parity ok."""
    spec = AdapterStoreSpec(prefix=f"file://{tmp_path / 'store'}/lora")
    store = AdapterStore(spec)
    store.ensure_bucket()
    versions = [store.push(make_adapter(tmp_path / f"v{i}", seed=i), NAME, base="bfs", force=True).version
                for i in range(3)]
    store.promote(NAME, versions[0])
    for v in versions[1:]:
        parity(store, v)
    server = GateServer(store)
    with serving(server.app()) as url:
        yield server, url, store, versions, str(tmp_path / "results.db")


def cfg(url: str, db: str) -> EvalConfig:
    return EvalConfig(endpoint=url, db=db, concurrency=8)


def outcomes(db: str, run_id: str) -> dict[int, bool]:
    return {r["seed"]: bool(r["success"]) for r in Store(db).episode_rows(run_id)}


def check_looks(result, db: str) -> None:
    """Each look's wins and losses are the runs' stored outcomes, and its verdict the test's on them."""
    cand, cur = outcomes(db, result.run), outcomes(db, result.run_against)
    assert sorted(cand) == sorted(cur) == list(range(result.seeds))
    design = Design(alpha=0.05, looks=(16, 32, 48, 64), min_discordant=6)
    discordant = []
    for look in result.looks:
        seeds = range(look.seeds)
        wins, losses = sum(cand[s] and not cur[s] for s in seeds), sum(cur[s] and not cand[s] for s in seeds)
        discordant.append(wins + losses)
        assert (look.wins, look.losses) == (wins, losses)
        assert look.verdict == judge(design, discordant, wins, losses).verdict


def test_a_better_candidate_is_promoted_and_its_evidence_recorded(env):
    server, url, store, (served, cand, _), db = env
    server.fail(served, range(0, 64, 3))  # the served version fails every third maze
    result = gate(cfg(url, db), f"{NAME}@{cand}")
    check_looks(result, db)
    assert result.verdict == "better" and result.promoted and result.reason is None
    assert result.seeds < 64 and len(result.looks) == result.seeds // 16  # stopped at the first look that decided
    assert store.resolve(NAME).version == cand
    newest = store.history(NAME)[0]
    assert (newest.version, newest.action) == (cand, "promote")
    assert newest.gate["against"] == served and newest.gate["verdict"] == "better"
    assert (newest.gate["wins"], newest.gate["losses"], newest.gate["seeds"]) == (result.wins, result.losses,
                                                                                  result.seeds)
    assert (newest.gate["run"], newest.gate["run_against"]) == (result.run, result.run_against)
    assert newest.gate["alpha"] == 0.05 and newest.gate["p_value"] == result.p_value
    # Every request was pinned (the stand-in refuses others) to one of the two versions.
    assert {m.rpartition("@")[2] for m in server.requests} == {served, cand}
    c = compare(Store(db), result.run_against, result.run)
    assert [(g["verdict"], g["promoted"], g["run"]) for g in c.gates] == [("better", True, result.run)]
    shown = CliRunner().invoke(cli, ["--db", db, "compare", result.run_against, result.run])
    assert shown.exit_code == 0 and f"gate {NAME}@{cand} vs {served}: better" in shown.output
    assert "promoted" in shown.output


def test_a_worse_candidate_leaves_the_name_and_the_decision_is_recorded(env):
    server, url, store, (served, cand, _), db = env
    server.fail(cand, range(0, 64, 2))
    result = gate(cfg(url, db), f"{NAME}@{cand}")
    check_looks(result, db)
    assert result.verdict == "worse" and not result.promoted and result.seeds < 64
    assert store.resolve(NAME).version == served
    newest = store.history(NAME)[0]
    assert (newest.version, newest.action, newest.reason) == (cand, "gate", None)
    assert newest.gate["verdict"] == "worse" and newest.gate["losses"] == result.losses
    # A rollback still returns to the version served before the last stable move: the gate entry is no move.
    assert store.rollback(NAME).version != served


def test_an_undecided_candidate_plays_every_look_and_leaves_the_name(env):
    server, url, store, (served, cand, _), db = env
    server.fail(served, [5, 40])  # two mazes apart: far too few to tell the two apart
    server.fail(cand, [9])
    result = gate(cfg(url, db), f"{NAME}@{cand}")
    check_looks(result, db)
    assert result.verdict == "undecided" and not result.promoted
    assert [look.seeds for look in result.looks] == [16, 32, 48, 64] and result.seeds == 64
    assert store.resolve(NAME).version == served
    assert store.history(NAME)[0].gate["verdict"] == "undecided"
    # Each version's run grew look by look and is complete on the 64 seeds.
    for run_id in (result.run, result.run_against):
        run = Store(db).get_run(run_id)
        assert run["status"] == "complete" and run["manifest"]["seeds"] == list(ALL)


def test_a_candidate_without_passed_parity_is_refused_before_anything_is_played(env, tmp_path):
    server, url, store, (served, cand, other), db = env
    unmeasured = store.push(make_adapter(tmp_path / "v9", seed=9), NAME, base="bfs", canary=5).canary.version
    store.abort_canary(NAME)
    with pytest.raises(ParityNotMeasured, match="has no parity record"):
        gate(cfg(url, db), f"{NAME}@{unmeasured}")
    parity(store, other, ok=False)
    with pytest.raises(ParityFailed, match="failed its parity check"):
        gate(cfg(url, db), f"{NAME}@{other}")
    assert server.requests == [] and Store(db).list_runs() == []
    assert store.resolve(NAME).version == served


def test_a_move_during_the_gate_makes_its_promotion_fail_and_is_recorded(env):
    server, url, store, (served, cand, other), db = env
    server.fail(served, ALL)

    def someone_promotes(look) -> None:
        if look.verdict == "better":  # after the test, before the decision is written
            store.promote(NAME, other)

    result = gate(cfg(url, db), f"{NAME}@{cand}", on_look=someone_promotes)
    assert result.verdict == "better" and not result.promoted
    assert f"served {other} by the decision, not {served}" in result.reason
    assert store.resolve(NAME).version == other
    newest = store.history(NAME)[0]
    assert (newest.version, newest.action) == (cand, "gate") and newest.reason == result.reason


def test_the_store_itself_takes_the_same_decisions(env):
    server, url, store, (served, cand, _), db = env
    server.fail(served, range(0, 64, 3))
    result = gate(cfg(url, db), f"{NAME}@{cand}", aliases=StoreAliases(store))
    assert result.promoted and store.resolve(NAME).version == cand
    parity(store, served)  # it was never measured: the gate would refuse it (as the test above checks)
    again = gate(cfg(url, db), f"{NAME}@{served}", aliases=StoreAliases(store))  # now the candidate
    assert again.verdict == "worse" and store.resolve(NAME).version == cand


def test_the_cli_exits_by_the_decision(env):
    server, url, store, (served, cand, other), db = env
    server.fail(cand, ALL)
    worse = CliRunner().invoke(cli, ["--endpoint", url, "--db", db, "gate", f"{NAME}@{cand}", "--json"])
    assert worse.exit_code == 1, worse.output
    assert json.loads(worse.output)["verdict"] == "worse"
    server.fail(served, ALL)
    better = CliRunner().invoke(cli, ["--endpoint", url, "--db", db, "gate", f"{NAME}@{other}"])
    assert better.exit_code == 0, better.output
    assert f"promoted: {NAME} -> {other}" in better.output
    refused = CliRunner().invoke(cli, ["--endpoint", url, "--db", db, "gate", f"{NAME}@{other}"])
    assert refused.exit_code == 2 and "serves version" in refused.output  # nothing to gate: it is served
    seeds = CliRunner().invoke(cli, ["--endpoint", url, "--db", db, "--seeds", "0-7", "gate", f"{NAME}@{cand}"])
    assert seeds.exit_code == 2 and "--seeds" in seeds.output
