"""Parity is a gate wherever a version starts to serve, in the store itself (so every door has it):
a canary at any weight, a rollback's target, a push over a published name, as promote; a version
whose parity failed stops serving when that is recorded; a check with no reference is ``not
compared``, never ``ok``, and gated unless ``adapters.parity_without_reference``. Against a real
local S3 server and a local folder (the store fixture runs each test on both)."""

from __future__ import annotations

import pytest

from serving.adapters import AdapterStore, parity_label
from serving.errors import ParityFailed, ParityNotCompared
from tests.support.adapter_store import make_adapter

FAILED = {"ok": False, "frames": 4, "max_abs_diff": 0.31, "reference": "hf+peft", "detail": "frame 2 differs"}
PASSED = {"ok": True, "frames": 4, "max_abs_diff": 0.004, "reference": "hf+peft"}
# What a measurement without the base's weights wrote: "ok" against the base alone.
AGAINST_BASE = {"ok": True, "frames": 4, "max_abs_diff": None, "reference": "base-differs",
                "detail": "served output differs from the base's; the base's weights are not readable here"}


@pytest.fixture
def agent(store, tmp_path):
    """(folders, v1, v2): ``agent`` pushed twice; v2 serves."""
    a, b = make_adapter(tmp_path / "a", seed=1), make_adapter(tmp_path / "b", seed=2)
    v1 = store.push(a, "agent", base="maze-tiny").version
    v2 = store.push(b, "agent", base="maze-tiny", force=True).version
    return (a, b), v1, v2


def _moves(store) -> list[tuple]:
    return [(m.version, m.action, m.weight, m.forced, m.by, m.reason) for m in store.history("agent")]


def test_canary_at_any_weight_refuses_a_failed_version_unless_forced(store, agent):
    _, v1, v2 = agent
    store.record_parity("agent", v1, FAILED)
    before = _moves(store)
    for weight in (100, 10, 0):
        with pytest.raises(ParityFailed) as err:
            store.canary("agent", v1, weight)
        assert err.value.status_code == 409 and err.value.code == "adapter_parity_failed"
        message = str(err.value)
        assert f"adapter 'agent' version {v1} failed its parity check against hf+peft" in message
        assert "canary refused" in message and f"`maze-serve adapters verify agent@{v1} --parity`" in message
        assert "an admin force it with --force-parity" in message
    assert store.resolve("agent").canary is None and _moves(store) == before  # nothing moved

    ref = store.canary("agent", v1, 100, force_parity=True, forced_by="ops")
    assert (ref.version, ref.canary.version, ref.canary.weight) == (v2, v1, 100)
    assert _moves(store)[0] == (v1, "canary", 100, "FAILED 0.31", "ops", None)
    with pytest.raises(ParityFailed):  # each move that serves it is judged: a re-weight too
        store.canary("agent", v1, 50)
    assert store.resolve("agent").canary.weight == 100


def test_rollback_refuses_a_failed_target_unless_forced(store, agent):
    _, v1, v2 = agent
    store.record_parity("agent", v1, FAILED)
    with pytest.raises(ParityFailed, match=f"version {v1} failed its parity check.*; rollback refused"):
        store.rollback("agent")
    assert store.resolve("agent").version == v2 and len(store.history("agent")) == 2
    assert store.rollback("agent", force_parity=True).version == v1
    assert _moves(store)[0] == (v1, "rollback", None, "FAILED 0.31", None, None)
    assert store.rollback("agent").version == v2  # back to v2: never checked, not blocked
    assert _moves(store)[0][3:] == (None, None, None)  # what the forced move noted is not carried over


def test_push_over_a_published_name_refuses_a_failed_version_unless_forced(store, agent):
    (a, _), v1, v2 = agent
    store.record_parity("agent", v1, FAILED)
    with pytest.raises(ParityFailed, match="; push refused"):
        store.push(a, "agent", base="maze-tiny", force=True)
    with pytest.raises(ParityFailed, match="; canary refused"):
        store.push(a, "agent", base="maze-tiny", canary=10)
    assert store.resolve("agent").version == v2 and store.resolve("agent").canary is None
    ref = store.push(a, "agent", base="maze-tiny", force=True, force_parity=True, forced_by="ops")
    assert ref.version == v1 and _moves(store)[0] == (v1, "push", None, "FAILED 0.31", "ops", None)


def test_not_compared_is_its_own_state_and_is_gated_unless_the_config_lets_it_pass(store, agent):
    _, v1, v2 = agent
    record = store.record_parity("agent", v1, AGAINST_BASE)
    assert record.ok is None and record.state == "not compared" and parity_label(record) == "not compared"
    assert store.parity("agent")[v1] == record
    for move in (lambda: store.promote("agent", v1), lambda: store.canary("agent", v1, 100)):
        with pytest.raises(ParityNotCompared) as err:
            move()
        assert err.value.status_code == 409 and err.value.code == "adapter_parity_not_compared"
        message = str(err.value)
        assert f"version {v1} has parity not compared" in message and "adapters.parity_without_reference" in message
        assert f"`maze-serve adapters verify agent@{v1} --parity`" in message and "--force-parity" in message
    assert store.resolve("agent").version == v2 and store.resolve("agent").canary is None

    lenient = AdapterStore(store.spec.model_copy(update={"parity_without_reference": True}), store.objects)
    assert lenient.promote("agent", v1).version == v1
    assert _moves(lenient)[0] == (v1, "promote", None, None, None, None)  # it passed: nothing forced
    assert store.promote("agent", v2).version == v2
    with pytest.raises(ParityNotCompared, match="; rollback refused"):  # the default store still refuses v1
        store.rollback("agent")
    assert store.rollback("agent", force_parity=True).version == v1
    assert _moves(store)[0][:4] == (v1, "rollback", None, "not compared")


def test_a_record_that_says_ok_against_the_base_alone_reads_as_not_compared(store, agent):
    _, v1, _ = agent
    store.refs.update("agent", lambda doc: {**doc, "parity": {v1: {**AGAINST_BASE, "at": "2030-01-01T00:00:00+00:00"}}})
    assert store.parity("agent")[v1].ok is None  # as stored by a writer that called it "ok"
    with pytest.raises(ParityNotCompared):
        store.promote("agent", v1)


def test_a_failed_record_stops_its_version_serving(store, agent, tmp_path):
    _, v1, v2 = agent
    store.canary("agent", v1, 30)
    store.record_parity("agent", v1, FAILED)  # the canary's version failed: the canary ends
    ref = store.resolve("agent")
    assert ref.version == v2 and ref.canary is None
    assert _moves(store)[0] == (v1, "abort", None, None, None, f"{v1} stopped serving: its parity FAILED 0.31")

    v3 = store.push(make_adapter(tmp_path / "c", seed=3), "agent", base="maze-tiny", force=True).version
    store.record_parity("agent", v3, FAILED)  # the version served failed: back to the one before (unchecked)
    assert store.resolve("agent").version == v2
    assert _moves(store)[0] == (v2, "rollback", None, None, None, f"{v3} stopped serving: its parity FAILED 0.31")

    store.record_parity("agent", v2, FAILED)  # the one before (v3) failed too: nothing to stop it with
    assert store.resolve("agent").version == v2 and _moves(store)[0][1] == "rollback"
    with pytest.raises(ParityFailed):
        store.promote("agent", v3)


def test_a_version_an_admin_forced_past_its_failure_keeps_serving(store, agent):
    _, v1, v2 = agent
    store.record_parity("agent", v1, FAILED)
    store.promote("agent", v1, force_parity=True, forced_by="ops")
    store.record_parity("agent", v1, {**FAILED, "max_abs_diff": 0.35})  # measured again: still failing
    assert store.resolve("agent").version == v1 and _moves(store)[0][1:5] == ("promote", None, "FAILED 0.31", "ops")
    store.canary("agent", v2, 20)
    store.record_parity("agent", v2, FAILED)  # the canary was not forced: it ends
    assert store.resolve("agent").canary is None
