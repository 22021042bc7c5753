"""Canary splits: the pure split (determinism, weights, edges, ramps), the canary in the adapter
store's ref (a real local S3 server and a local folder) and the `maze-serve adapters
canary/promote/abort` commands."""

from __future__ import annotations

import json
import uuid

import pytest
from click.testing import CliRunner

from serving.adapters.canary import BUCKETS, Canary, bucket, check_weight, serves_canary, session_key
from serving.cli import main
from serving.errors import AdapterNotFound, InvalidCanary, NoCanary
from tests.serving.cli.test_adapters import config_file
from tests.support.adapter_store import make_adapter

V1, V2 = "aaaaaaaaaaaa", "bbbbbbbbbbbb"
KEYS = [f"episode-{i}" for i in range(2000)]


def share(weight: float, keys=KEYS, name: str = "agent", version: str = V2) -> float:
    canary = Canary(version=version, weight=weight)
    return sum(serves_canary(name, canary, k) for k in keys) / len(keys)


# -- the split ----------------------------------------------------------------------------------
def test_split_is_deterministic_and_stable_across_processes():
    canary = Canary(version=V2, weight=50)
    first = [serves_canary("agent", canary, k) for k in KEYS]
    assert first == [serves_canary("agent", canary, k) for k in KEYS]
    # sha256-based: the same bucket in every process and Python version (a change here reshuffles
    # every running canary's cohorts)
    assert bucket("agent", V2, "episode-0") == bucket("agent", V2, "episode-0") < BUCKETS
    assert [bucket("agent", V2, f"episode-{i}") for i in range(3)] == [9484, 836, 9562]


@pytest.mark.parametrize("weight", [1, 10, 25, 50, 90, 99.5])
def test_weights_hold_over_2000_sessions(weight):
    # binomial sd at 50% over 2,000 keys is 1.1 points: 3.5 points is more than 3 sd
    assert abs(share(weight) - weight / 100) < 0.035, share(weight)


def test_edge_weights_and_missing_key():
    assert share(0) == 0.0 and share(100) == 1.0
    assert not serves_canary("agent", Canary(version=V2, weight=100), None)  # no request: stable
    assert not serves_canary("agent", None, "episode-1")


def test_raising_the_weight_only_moves_sessions_to_the_canary():
    at = {w: {k for k in KEYS if serves_canary("agent", Canary(version=V2, weight=w), k)} for w in (5, 20, 60)}
    assert at[5] <= at[20] <= at[60] and len(at[5]) < len(at[20]) < len(at[60])


def test_a_new_canary_version_or_another_name_draws_another_cohort():
    cohort = {k for k in KEYS if serves_canary("agent", Canary(version=V2, weight=50), k)}
    other_version = {k for k in KEYS if serves_canary("agent", Canary(version="cccccccccccc", weight=50), k)}
    other_name = {k for k in KEYS if serves_canary("other", Canary(version=V2, weight=50), k)}
    for other in (other_version, other_name):
        assert 0.35 < len(cohort & other) / len(cohort) < 0.65  # independent: about half overlap


def test_weight_validation():
    assert check_weight("12.5") == 12.5 and check_weight(0) == 0 and check_weight(100) == 100
    for bad in (-1, 100.01, "abc", None, float("nan"), float("inf")):
        with pytest.raises(InvalidCanary, match="percentage from 0 to 100"):
            check_weight(bad)


def test_session_key_precedence():
    headers = {"x-session-id": "episode-7"}
    assert session_key(headers, "user-1", "req-1") == "episode-7"
    assert session_key({}, "user-1", "req-1") == "user-1"
    assert session_key({}, None, "req-1") == session_key(None, "", "req-1") == "req-1"
    assert session_key(None, None, None) is None


# -- the store ----------------------------------------------------------------------------------
@pytest.fixture
def versions(store, tmp_path):
    v1 = store.push(make_adapter(tmp_path / "v1", seed=1), "agent", base="maze-tiny")
    v2 = store.push(make_adapter(tmp_path / "v2", seed=2, rank=4), "agent", base="maze-tiny", force=True)
    store.promote("agent", v1.version)  # v1 serves, v2 is the candidate
    return v1.version, v2.version


def test_canary_lives_in_the_ref_with_its_history(store, versions):
    v1, v2 = versions
    ref = store.canary("agent", v2, 10)
    assert ref.version == v1 and ref.canary.version == v2 and ref.canary.weight == 10 and ref.canary.rank == 4
    assert store.resolve("agent") == ref
    started = ref.canary.started_at
    assert store.canary("agent", v2, 10) == ref  # same split again: no write, no history entry
    ramped = store.canary("agent", v2, 50)
    assert ramped.canary.weight == 50 and ramped.canary.started_at == started
    moves = store.history("agent")
    assert [(m.version, m.action, m.weight) for m in moves[:3]] == [(v2, "canary", 50), (v2, "canary", 10),
                                                                    (v1, "promote", None)]
    doc, _ = store.refs.read("agent")
    assert doc["version"] == v1 and doc["canary"]["version"] == v2  # one object: the split and its history


def test_promote_the_canary_ends_it(store, versions):
    v1, v2 = versions
    store.canary("agent", v2, 30)
    ref = store.promote("agent")
    assert (ref.version, ref.canary) == (v2, None)
    assert [(m.version, m.action) for m in store.history("agent")[:2]] == [(v2, "promote"), (v2, "canary")]
    with pytest.raises(NoCanary, match="runs no canary"):
        store.promote("agent")
    # rolling back after a promoted canary returns to the version served before it
    assert store.rollback("agent").version == v1


def test_abort_keeps_the_version_served(store, versions):
    v1, v2 = versions
    store.canary("agent", v2, 30)
    ref = store.abort_canary("agent")
    assert (ref.version, ref.canary) == (v1, None) and store.resolve("agent").canary is None
    assert [(m.version, m.action) for m in store.history("agent")[:2]] == [(v2, "abort"), (v2, "canary")]
    with pytest.raises(NoCanary):
        store.abort_canary("agent")


def test_stable_moves_keep_a_running_canary(store, versions, tmp_path):
    v1, v2 = versions
    store.canary("agent", v2, 20)
    v3 = store.push(make_adapter(tmp_path / "v3", seed=3), "agent", base="maze-tiny", force=True)
    assert v3.canary == Canary(version=v2, weight=20, base="maze-tiny", rank=4,
                               started_at=store.resolve("agent").canary.started_at)
    # rollback skips the canary entries: back to the version served before the last stable move
    back = store.rollback("agent")
    assert back.version == v1 and back.canary.version == v2
    assert (store.rollback("agent").version, store.resolve("agent").canary) == (v3.version, back.canary)
    # the served version becoming the canary's ends the canary as promoted
    assert store.promote("agent", v2).canary is None


def test_push_as_a_canary_leaves_the_version_served(store, versions, tmp_path):
    v1, _ = versions
    ref = store.push(make_adapter(tmp_path / "v3", seed=3), "agent", base="maze-tiny", canary=10)
    assert ref.version == v1 and ref.canary.weight == 10 and ref.canary.rank == 8
    assert store.resolve_version("agent", ref.canary.version).folder == f"agent@{ref.canary.version}"
    assert store.history("agent")[0].action == "canary"
    with pytest.raises(AdapterNotFound, match="not published yet"):
        store.push(make_adapter(tmp_path / "new", seed=4), "fresh", canary=10)
    with pytest.raises(InvalidCanary):
        store.push(make_adapter(tmp_path / "v4", seed=4), "agent", canary=-5)
    assert store.resolve("agent") == ref and "fresh" not in store.list_names()


def test_canary_errors(store, versions):
    v1, v2 = versions
    with pytest.raises(InvalidCanary, match="serves version"):
        store.canary("agent", v1, 10)
    with pytest.raises(InvalidCanary, match="0 to 100"):
        store.canary("agent", v2, 101)
    with pytest.raises(AdapterNotFound, match="no version"):
        store.canary("agent", "0" * 12, 10)
    with pytest.raises(AdapterNotFound, match="'ghost'"):
        store.canary("ghost", v2, 10)
    with pytest.raises(AdapterNotFound):
        store.abort_canary("ghost")
    assert store.resolve("agent").canary is None  # nothing was written


# -- the CLI ------------------------------------------------------------------------------------
def test_cli_canary_promote_abort_with_exit_codes(s3_server, tmp_path):
    from serving.adapters import AdapterStore
    from serving.adapters.files import content_version
    from serving.config import ServingConfig

    cfg = config_file(tmp_path, s3_server.url)
    AdapterStore(ServingConfig.from_file(cfg).adapters).ensure_bucket()
    run = lambda *a: CliRunner().invoke(main, ["-c", cfg, "adapters", *a])
    a, b = make_adapter(tmp_path / "a", seed=1), make_adapter(tmp_path / "b", seed=2)
    v1, v2 = content_version(a), content_version(b)
    assert run("push", str(a), "agent").exit_code == 0
    assert run("push", str(b), "agent", "--force").exit_code == 0
    assert run("promote", f"agent@{v1}").exit_code == 0

    started = run("canary", f"agent@{v2}", "--weight", "10")
    assert started.exit_code == 0 and started.output.strip() == f"agent -> {v1} (90%), canary {v2} (10%)"
    assert f"agent\t{v1}" in run("list").output and f"canary {v2} 10%" in run("list").output
    assert run("history", "agent").output.splitlines()[0].split("\t")[::2] == [v2, "canary"]
    assert json.loads(run("history", "agent", "--json").output)[0]["weight"] == 10
    assert run("canary", f"agent@{v2}", "--weight", "50").exit_code == 0
    aborted = run("abort", "agent")
    assert aborted.exit_code == 0 and aborted.output.strip() == f"agent -> {v1}"
    c = make_adapter(tmp_path / "c", seed=3)
    pushed = run("push", str(c), "agent", "--canary", "25")
    assert pushed.exit_code == 0, pushed.output
    assert pushed.output.strip() == (f"published maze-tiny:agent version {content_version(c)} as a canary "
                                     f"(25%; {v1} serves the rest)")
    assert run("canary", f"agent@{v2}", "--weight", "100").exit_code == 0  # replaces that canary
    promoted = run("promote", "agent")
    assert promoted.exit_code == 0 and promoted.output.strip() == f"agent -> {v2}"

    for args, code, says in [
        (("canary", "agent", "--weight", "10"), 2, "NAME@VERSION"),
        (("canary", f"agent@{v1}", "--weight", "150"), 2, "0 to 100"),
        (("canary", f"agent@{v1}", "--weight", "ten"), 2, "not a number"),
        (("canary", f"agent@{v2}", "--weight", "10"), 2, "serves version"),
        (("canary", "agent@latest", "--weight", "10"), 2, "invalid adapter version"),
        (("canary", f"agent@{'0' * 12}", "--weight", "10"), 4, "no version"),
        (("canary", f"ghost-{uuid.uuid4().hex[:4]}@{v1}", "--weight", "10"), 4, "not found"),
        (("abort", "agent"), 4, "runs no canary"),
        (("promote", "agent"), 4, "runs no canary"),
        (("push", str(c), "ghost-new", "--canary", "10"), 4, "not published yet"),
        (("push", str(c), "agent", "--canary", "x"), 2, "not a number"),
    ]:
        result = run(*args)
        assert result.exit_code == code, (args, result.output)
        assert says in result.output and result.output.startswith("error: ") and "Traceback" not in result.output
    missing = run("canary", "agent")  # no --weight: click's usage error
    assert missing.exit_code == 2 and "--weight" in missing.output
