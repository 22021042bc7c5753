"""The live guard's ledger (serving.guard.ledger), pure: each outcome is paired with the newest of
the other arm's waiting outcomes, a session counts once, an errored session counts in the guard rail
and in no pair, the waiting line is bounded, and the verdict follows the policy."""

from __future__ import annotations

from serving.config import GuardPolicy
from serving.guard.ledger import Outcome, fold, fresh, judge, same_canary, summary, with_verdict

WON, LOST = Outcome(solved=True), Outcome(solved=False)


def ledger():
    return fresh("agent", "c" * 12, "2026-01-01T00:00:00+00:00", "s" * 12)


def play(doc, *reports, pending_max=1000):
    for i, (arm, outcome) in enumerate(reports):
        doc = fold(doc, arm, f"session-{len(doc['seen'])}-{i}", outcome, pending_max)
    return doc


def test_outcomes_pair_with_the_newest_waiting_on_the_other_arm():
    doc = play(ledger(), ("stable", LOST), ("stable", WON), ("canary", LOST))  # pairs with the newest: WON
    assert doc["pairs"] == {"wins": 0, "losses": 1, "ties": 0}
    assert doc["pending"] == {"arm": "stable", "outcomes": "0"}
    doc = play(doc, ("canary", WON))  # pairs with the stable LOST
    assert doc["pairs"] == {"wins": 1, "losses": 1, "ties": 0} and doc["pending"] == {"arm": None, "outcomes": ""}
    doc = play(doc, ("canary", WON), ("stable", WON))
    assert doc["pairs"]["ties"] == 1
    assert doc["arms"]["canary"]["sessions"] == 3 and doc["arms"]["canary"]["solved"] == 2


def test_a_session_counts_once_and_errors_pair_with_nothing():
    doc = fold(ledger(), "canary", "s1", WON, 1000)
    assert fold(doc, "canary", "s1", WON, 1000) is None
    assert "s1" not in str(doc["seen"])  # only digests are kept
    doc = fold(doc, "stable", "s2", Outcome(solved=False, error=True, latency_s=0.5), 1000)
    assert doc["pairs"] == {"wins": 0, "losses": 0, "ties": 0} and doc["arms"]["stable"]["errors"] == 1
    assert doc["pending"] == {"arm": "canary", "outcomes": "1"}


def test_the_waiting_line_keeps_the_newest():
    doc = play(ledger(), *[("stable", WON)] * 5, ("stable", LOST), pending_max=3)
    assert doc["pending"]["outcomes"] == "110"


def test_worse_canary_is_rolled_back_after_enough_pairs():
    policy = GuardPolicy()
    doc = play(ledger(), *[("stable", WON), ("canary", LOST)] * 6)
    assert judge(doc, policy) is None  # 6 losses: e = 18.3, not yet 20
    doc = play(doc, ("stable", WON), ("canary", LOST))
    verdict = judge(doc, policy)
    assert verdict.action == "rollback" and "lost 7 and won 0" in verdict.reason
    assert verdict.evidence["losses"] == 7 and verdict.evidence["e_worse"] >= 20
    ended = with_verdict(doc, verdict, "abort")
    assert ended["verdict"]["action"] == "rollback" and ended["verdict"]["outcome"] == "abort"


def test_better_canary_is_promoted_only_where_the_policy_says():
    doc = play(ledger(), *[("stable", LOST), ("canary", WON)] * 7)
    assert judge(doc, GuardPolicy(promote=True)).action == "promote"
    found = judge(doc, GuardPolicy())
    assert found.action == "better" and "leaves promotion to a person" in found.reason
    noted = with_verdict(doc, found, "guard")
    assert noted["verdict"] is None and judge(noted, GuardPolicy()) is None  # recorded once, watching goes on


def test_min_discordant_holds_back_any_verdict():
    doc = play(ledger(), *[("stable", WON), ("canary", LOST)] * 7)
    assert judge(doc, GuardPolicy(min_discordant=8)) is None


def test_guard_rails_on_errors_and_latency():
    policy = GuardPolicy(rails_min_sessions=10)
    doc = play(ledger(), *[("stable", Outcome(True, latency_s=0.1)), ("canary", Outcome(True, latency_s=0.1))] * 9)
    doc = play(doc, ("stable", WON), ("canary", Outcome(False, error=True)))
    verdict = judge(doc, policy)
    assert verdict.action == "rollback" and "10% of the canary's sessions ended on an endpoint error" in verdict.reason
    slow = play(ledger(), *[("stable", Outcome(True, latency_s=0.1)), ("canary", Outcome(True, latency_s=0.3))] * 10)
    assert "mean turn latency 0.300s is over 2x" in judge(slow, policy).reason
    assert judge(slow, GuardPolicy(rails_min_sessions=11)) is None


def test_a_new_canary_run_starts_a_new_ledger():
    doc = ledger()
    assert same_canary(doc, "c" * 12, "2026-01-01T00:00:00+00:00", "s" * 12)
    assert not same_canary(doc, "c" * 12, "2026-01-02T00:00:00+00:00", "s" * 12)  # restarted
    assert not same_canary(doc, "c" * 12, "2026-01-01T00:00:00+00:00", "t" * 12)  # stable moved
    assert "seen" not in summary(doc) and summary(doc)["evidence"]["wins"] == 0
