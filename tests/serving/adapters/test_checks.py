"""A published version's checks against a real local S3 server and in a local folder (the store fixture
runs each test on both): its stored files re-hashed (``verify``), and parity records in the ref
(``record_parity``) gating ``promote`` (the other moves' gate: test_parity_gate.py)."""

from __future__ import annotations

import json

import pytest

from serving.adapters import ParityRecord, parity_label
from serving.adapters.files import content_version, content_version_of
from serving.adapters.parity import DETAIL_KEEP
from serving.adapters.refs import HISTORY_KEEP
from serving.errors import (
    AdapterIntegrityError,
    AdapterNotFound,
    BadAdapterName,
    BadRequest,
    ParityFailed,
    ParityNotCompared,
)
from tests.support.adapter_store import make_adapter

PASSED = {"ok": True, "frames": 64, "max_abs_diff": 0.004, "reference": "hf+peft", "detail": "64 frames within 0.01"}
FAILED = {"ok": False, "frames": 64, "max_abs_diff": 0.31, "reference": "hf+peft", "detail": "frame 12 differs"}


@pytest.fixture
def two_versions(store, tmp_path):
    v1 = store.push(make_adapter(tmp_path / "v1", seed=1), "agent", base="maze-tiny").version
    v2 = store.push(make_adapter(tmp_path / "v2", seed=2), "agent", base="maze-tiny", force=True).version
    return v1, v2


def _overwrite(store, name: str, version: str, fname: str, body: bytes) -> None:
    store.objects.put(store.versions.key(name, version, fname), body)


# -- verify -----------------------------------------------------------------------------------------
def test_content_version_of_bytes_is_the_folders_version(tmp_path):
    a = make_adapter(tmp_path / "a")
    config, weights = (a / "adapter_config.json").read_bytes(), (a / "adapter_model.safetensors").read_bytes()
    assert content_version_of(config, weights) == content_version(a)
    assert content_version_of(config, weights + b"\0") != content_version(a)


def test_verify_ok_for_the_served_and_an_explicit_version(store, two_versions):
    v1, v2 = two_versions
    report = store.verify("agent")
    assert report.ok and (report.name, report.version, report.actual) == ("agent", v2, v2)
    assert report.weights_bytes > 0 and report.config_bytes > 0
    assert store.verify("agent", v1).actual == v1


def test_verify_names_weights_overwritten_after_publishing(store, two_versions, tmp_path):
    v1, v2 = two_versions
    other = make_adapter(tmp_path / "other", seed=9)
    _overwrite(store, "agent", v2, "adapter_model.safetensors", (other / "adapter_model.safetensors").read_bytes())
    with pytest.raises(AdapterIntegrityError) as err:
        store.verify("agent")
    actual = content_version_of((tmp_path / "v2" / "adapter_config.json").read_bytes(),
                                (other / "adapter_model.safetensors").read_bytes())
    assert str(err.value) == (f"adapter agent@{v2}: the stored files hash to {actual}, not to version {v2}: "
                              "they changed after publishing")
    assert err.value.code == "adapter_integrity_failed"
    report = store.verify("agent", check=False)  # returned, not raised
    assert not report.ok and report.actual == actual
    assert store.verify("agent", v1).ok  # the other version is untouched


def test_verify_names_a_config_overwritten_after_publishing(store, two_versions):
    v1, _ = two_versions
    config = json.loads(store.versions.read("agent", v1, "adapter_config.json"))
    _overwrite(store, "agent", v1, "adapter_config.json", json.dumps({**config, "lora_alpha": 99}).encode())
    with pytest.raises(AdapterIntegrityError, match=f"not to version {v1}: they changed after publishing"):
        store.verify("agent", v1)


def test_verify_missing_weights_and_unknown_versions(store, two_versions):
    v1, _ = two_versions
    store.objects.delete(store.versions.key("agent", v1, "adapter_model.safetensors"))
    with pytest.raises(AdapterIntegrityError, match="adapter_model.safetensors is missing"):
        store.verify("agent", v1)
    with pytest.raises(AdapterNotFound, match="no version"):
        store.verify("agent", "0" * 12)
    with pytest.raises(AdapterNotFound, match="'ghost' not found"):
        store.verify("ghost")
    with pytest.raises(BadAdapterName):
        store.verify("agent", "latest")


# -- parity records ---------------------------------------------------------------------------------
def test_record_parity_lands_in_the_ref_per_version(store, two_versions):
    v1, v2 = two_versions
    assert store.parity("agent") == {} and store.resolve("agent").parity is None
    record = store.record_parity("agent", v2, {**PASSED, "per_frame": [0.001] * 64})  # extra keys are not kept
    assert record == ParityRecord(ok=True, frames=64, max_abs_diff=0.004, reference="hf+peft", at=record.at,
                                  detail="64 frames within 0.01") and record.at
    store.record_parity("agent", v1, FAILED)
    doc, _ = store.refs.read("agent")
    assert set(doc["parity"]) == {v1, v2} and "per_frame" not in doc["parity"][v2]
    assert store.resolve("agent").parity == {v2: record}  # the ref shows the versions it serves
    assert store.resolve_version("agent", v1).parity[v1].ok is False
    assert [parity_label(store.parity("agent").get(v)) for v in (v2, v1, "0" * 12)] == ["ok 0.004", "FAILED 0.31", "-"]
    again = store.record_parity("agent", v2, {**FAILED, "at": "2030-01-01T00:00:00+00:00"})  # replaces
    assert store.parity("agent")[v2] == again and again.at == "2030-01-01T00:00:00+00:00"
    long = store.record_parity("agent", v2, {**PASSED, "detail": "x" * 5000, "max_abs_diff": None})
    assert len(long.detail) == DETAIL_KEEP and parity_label(long) == "ok"


def test_record_parity_refuses_what_it_cannot_keep(store, two_versions, tmp_path):
    v1, _ = two_versions
    loose = store.push(make_adapter(tmp_path / "loose", seed=5), "other").version
    with pytest.raises(AdapterNotFound, match="no version .* in its history"):
        store.record_parity("agent", loose, PASSED)  # a version of another name
    with pytest.raises(AdapterNotFound, match="'ghost' not found"):
        store.record_parity("ghost", v1, PASSED)
    for bad, says in [({**PASSED, "ok": "yes"}, "ok must be"), ({**PASSED, "frames": -1}, "frames"),
                      ({**PASSED, "max_abs_diff": float("nan")}, "max_abs_diff"), ({**PASSED, "reference": ""},
                                                                                  "reference"),
                      ({k: v for k, v in PASSED.items() if k != "frames"}, "frames")]:
        with pytest.raises(BadRequest, match=says):
            store.record_parity("agent", v1, bad)
    assert store.parity("agent") == {}


def test_parity_survives_moves_and_is_bounded_by_history(store, two_versions, tmp_path):
    v1, v2 = two_versions
    store.record_parity("agent", v1, PASSED)
    store.record_parity("agent", v2, PASSED)
    store.promote("agent", v1)
    store.canary("agent", v2, 10)
    store.abort_canary("agent")
    store.rollback("agent")
    assert set(store.parity("agent")) == {v1, v2}  # every move kept them
    # a record goes once its version left the history (HISTORY_KEEP newer moves), at the next write
    v3 = store.push(make_adapter(tmp_path / "v3", seed=3), "agent", force=True).version
    v4 = store.push(make_adapter(tmp_path / "v4", seed=4), "agent", canary=10).canary.version
    store.record_parity("agent", v3, PASSED)
    for i in range(HISTORY_KEEP):
        store.canary("agent", v4, 20 + i % 2)  # a re-weight is a move
    assert {m.version for m in store.history("agent")} == {v4}
    assert store.promote("agent").version == v4 and store.parity("agent") == {}
    store.record_parity("agent", v4, PASSED)
    assert set(store.parity("agent")) == {v4}


def test_promote_refuses_a_failed_version_unless_forced(store, two_versions):
    v1, v2 = two_versions
    store.record_parity("agent", v1, FAILED)
    with pytest.raises(ParityFailed) as err:
        store.promote("agent", v1)
    assert err.value.status_code == 409 and err.value.code == "adapter_parity_failed"
    message = str(err.value)
    assert f"version {v1} failed its parity check against hf+peft" in message
    assert "max abs difference 0.31 over 64 frames (frame 12 differs)" in message and "promote refused" in message
    assert f"`maze-serve adapters verify agent@{v1} --parity`" in message and "--force-parity" in message
    assert store.resolve("agent").version == v2  # nothing moved
    assert store.promote("agent", v1, force_parity=True, forced_by="ops").version == v1
    newest = store.history("agent")[0]
    assert (newest.action, newest.forced, newest.by) == ("promote", "FAILED 0.31", "ops")
    store.rollback("agent")  # back to v2: never checked, so not blocked


def test_promote_gates_the_canary_and_lets_unchecked_and_passed_versions_through(store, two_versions):
    v1, v2 = two_versions
    assert store.promote("agent", v1).version == v1  # no record: not blocked
    store.canary("agent", v2, 20)
    store.record_parity("agent", v2, {**PASSED, "ok": None, "reference": "base-differs", "max_abs_diff": None})
    assert store.resolve("agent").parity[v2].state == "not compared"  # the canary's record shows on the ref
    with pytest.raises(ParityNotCompared, match=f"version {v2} has parity not compared"):
        store.promote("agent")  # promoting the canary
    assert store.resolve("agent").canary.version == v2  # a record not compared does not stop a canary
    store.record_parity("agent", v2, PASSED)  # measured again, passed
    assert store.promote("agent").version == v2
    assert store.promote("agent", v2).version == v2  # already served: changes nothing, refuses nothing
    assert store.history("agent")[0].action == "promote" and store.history("agent")[1].action == "canary"
