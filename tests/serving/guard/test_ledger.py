"""The live guard's ledger (serving.guard.ledger), pure: sessions are paired by when they started,
once the horizon has passed, each canary session with the stable one that started nearest to it,
never by when they ended; a session counts once, an errored or overlong one in no pair, the waiting
line is bounded, and the verdict follows the policy."""

from __future__ import annotations

from serving.config import GuardPolicy
from serving.guard.ledger import Outcome, fold, fresh, judge, same_canary, summary, with_verdict

H = 10.0  # the horizon the tests pair with
WON, LOST = Outcome(solved=True, duration_s=H), Outcome(solved=False, duration_s=H)  # paired as they arrive


def ledger(started_at: str = "1970-01-01T00:00:00+00:00"):
    return fresh("agent", "c" * 12, started_at, "s" * 12)


def play(doc, *reports, pending_max=1000, t0=None):
    """Each (arm, outcome) reported one second after the last (or at its own time: (arm, outcome, t))."""
    t = t0 if t0 is not None else 1000.0 + len(doc["seen"])
    for i, report in enumerate(reports):
        arm, outcome, *at = report
        t = at[0] if at else t + 1
        doc = fold(doc, arm, f"session-{len(doc['seen'])}-{i}", outcome, now=t, horizon_s=H, pending_max=pending_max)
    return doc


def test_sessions_pair_by_start_with_the_nearest_once_the_horizon_has_passed():
    # started at 100 (canary, lost), 101 (stable, won), 130 (stable, lost); reported when they ended
    doc = play(ledger(), ("stable", Outcome(True, duration_s=4), 105.0), ("canary", Outcome(False, duration_s=8), 108.0))
    assert doc["pairs"] == {"wins": 0, "losses": 0, "ties": 0} and len(doc["waiting"]) == 2  # horizon not passed
    doc = play(doc, ("stable", Outcome(False, duration_s=2), 132.0))  # closes 100 and 101: they pair
    assert doc["pairs"] == {"wins": 0, "losses": 1, "ties": 0}
    assert doc["waiting"] == [[130.0, "s", 0]]


def test_the_order_outcomes_arrive_in_decides_nothing():
    """A canary's quick win reported first and a stable failure reported late pair as they started."""
    early = play(ledger(), ("canary", Outcome(True, duration_s=2), 202.0), ("stable", Outcome(False, duration_s=9), 209.0),
                 ("stable", Outcome(True, duration_s=1), 230.0))
    late = play(ledger(), ("stable", Outcome(False, duration_s=9), 209.0), ("canary", Outcome(True, duration_s=2), 202.5),
                ("stable", Outcome(True, duration_s=1), 230.0))
    assert early["pairs"] == late["pairs"] == {"wins": 1, "losses": 0, "ties": 0}  # 200 pairs with 200, not 229


def test_a_session_counts_once_and_errors_and_overlong_ones_pair_with_nothing():
    doc = fold(ledger(), "canary", "s1", WON, now=21.0, horizon_s=H, pending_max=1000)
    assert fold(doc, "canary", "s1", WON, now=22.0, horizon_s=H, pending_max=1000) is None
    assert "s1" not in str(doc["seen"])  # only digests are kept
    doc = fold(doc, "stable", "s2", Outcome(solved=False, error=True, latency_s=0.5), now=23.0, horizon_s=H,
               pending_max=1000)
    doc = fold(doc, "stable", "s3", Outcome(solved=True, duration_s=H + 1), now=24.0, horizon_s=H, pending_max=1000)
    assert doc["pairs"] == {"wins": 0, "losses": 0, "ties": 0} and doc["arms"]["stable"]["errors"] == 1
    assert doc["arms"]["stable"]["sessions"] == 2 and doc["arms"]["stable"]["solved"] == 1
    assert [e[1] for e in doc["waiting"]] == ["c"]


def test_a_session_that_started_before_the_canary_pairs_with_nothing():
    doc = ledger("1970-01-01T00:01:40+00:00")  # the canary started at t = 100
    assert doc["since"] == 100.0
    doc = play(doc, ("stable", Outcome(False, duration_s=9), 105.0), ("canary", Outcome(True, duration_s=2), 106.0),
               ("stable", Outcome(True, duration_s=1), 105.5), ("canary", WON, 200.0))
    # the stable session that started at 96 (still running at 100) is counted, in no pair: the canary's
    # session of 104 pairs with the stable one of 104.5
    assert doc["arms"]["stable"]["sessions"] == 2 and doc["pairs"] == {"wins": 0, "losses": 0, "ties": 1}


def test_the_waiting_line_keeps_the_newest():
    doc = play(ledger(), *[("stable", WON)] * 5, ("stable", LOST), pending_max=3)
    assert [e[2] for e in doc["waiting"]] == [1, 1, 0]


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
    doc = play(ledger(), *[("stable", Outcome(True, H, latency_s=0.1)), ("canary", Outcome(True, H, latency_s=0.1))] * 9)
    doc = play(doc, ("stable", WON), ("canary", Outcome(False, error=True)))
    verdict = judge(doc, policy)
    assert verdict.action == "rollback" and "10% of the canary's sessions ended on an endpoint error" in verdict.reason
    slow = play(ledger(), *[("stable", Outcome(True, H, latency_s=0.1)), ("canary", Outcome(True, H, latency_s=0.3))] * 10)
    assert "mean turn latency 0.300s is over 2x" in judge(slow, policy).reason
    assert judge(slow, GuardPolicy(rails_min_sessions=11)) is None


def test_a_new_canary_run_starts_a_new_ledger():
    doc = ledger()
    assert same_canary(doc, "c" * 12, "1970-01-01T00:00:00+00:00", "s" * 12)
    assert not same_canary(doc, "c" * 12, "2026-01-02T00:00:00+00:00", "s" * 12)  # restarted
    assert not same_canary(doc, "c" * 12, "1970-01-01T00:00:00+00:00", "t" * 12)  # stable moved
    assert "seen" not in summary(doc) and summary(doc)["evidence"]["wins"] == 0 and summary(doc)["waiting"] == 0


def test_the_policy_per_name_is_checked_at_load():
    import pytest
    from pydantic import ValidationError

    from serving.config import GuardSpec

    spec = GuardSpec(names={"agent": {"promote": True, "alpha_rollback": 0.01}})
    assert spec.policy("agent").promote and spec.policy("agent").alpha_rollback == 0.01
    assert spec.policy("other") == GuardPolicy()
    with pytest.raises(ValidationError, match=r"adapters.guard.names.agent: alpha_rollback: Input should be less"):
        GuardSpec(names={"agent": {"alpha_rollback": 0.7}})
    with pytest.raises(ValidationError, match="adapters.guard.names: 'bad/name' is not an adapter name"):
        GuardSpec(names={"bad/name": {}})
    with pytest.raises(ValidationError, match="promot"):
        GuardSpec(names={"agent": {"promot": True}})  # a misspelt field is refused, not ignored
