"""Pins and replica reports in the adapter store (serving.placement) on a real local S3 server, and
the rows `maze-serve adapters where` prints (pure)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from serving.errors import AdapterNotFound, NotPinned, TooManyPins
from serving.placement import PlacementStore, where_rows
from serving.placement.pins import REPORT_STALE_S

from tests.support.adapter_store import make_adapter
from tests.support.threads import run_together


@pytest.fixture
def placement(store, tmp_path):
    for i, name in enumerate(("hot", "warm", "cold")):
        store.push(make_adapter(tmp_path / name, seed=i), name, base="maze-tiny")
    return PlacementStore(store)


def test_pin_and_unpin_a_published_name(placement):
    assert placement.pins() == {}
    assert set(placement.pin("hot", slots=8)) == {"hot"}
    assert set(placement.pin("hot", slots=8)) == {"hot"}  # pinning again changes nothing
    assert set(placement.pin("warm", slots=8)) == {"hot", "warm"}
    assert set(placement.unpin("hot")) == {"warm"} and set(placement.pins()) == {"warm"}


def test_pin_errors_name_the_problem(placement):
    with pytest.raises(AdapterNotFound):
        placement.pin("never-pushed", slots=8)
    placement.pin("hot", slots=3)
    placement.pin("warm", slots=3)
    with pytest.raises(TooManyPins, match="one must stay free"):  # 3 slots: at most 2 pinned
        placement.pin("cold", slots=3)
    with pytest.raises(NotPinned, match="'cold' is not pinned"):
        placement.unpin("cold")


def test_concurrent_pins_all_land(placement):
    names = ["hot", "warm", "cold"]
    assert run_together([lambda n=n: placement.pin(n, 8) for n in names]) == []
    assert set(placement.pins()) == set(names)  # conditional writes: no pin lost to a race


def test_reports_round_trip_and_go_stale(placement):
    placement.write_report("r1", {"node": "127.0.0.3", "resident": [{"id": "maze-tiny:hot@aaaaaaaaaaaa",
                                                                     "last_used": 100.0, "pinned": True}]})
    placement.write_report("r2", {"node": "127.0.0.4", "resident": []})
    reports = placement.reports()
    assert [r["replica"] for r in reports] == ["r1", "r2"] and not any(r["stale"] for r in reports)
    # Each report goes stale on its own clock: r2 may be written seconds after r1 on a loaded machine.
    newest = max(r["updated_at"] for r in reports)
    assert all(r["stale"] for r in placement.reports(now=newest + REPORT_STALE_S + 1))
    oldest = min(r["updated_at"] for r in reports)
    assert not any(r["stale"] for r in placement.reports(now=oldest + REPORT_STALE_S - 1))
    placement.remove_report("r2")
    assert [r["replica"] for r in placement.reports()] == ["r1"]


def test_where_rows_mark_pins_and_last_use():
    reports = [{"replica": "r1", "node": "127.0.0.3", "stale": False,
                "resident": [{"id": "maze-tiny:hot@aaaaaaaaaaaa", "last_used": 90.0},
                             {"id": "maze-tiny:cold@bbbbbbbbbbbb", "last_used": None}]}]
    rows = where_rows(reports, {"hot": {}}, now=100.0)
    assert rows == [
        {"replica": "r1", "node": "127.0.0.3", "adapter": "maze-tiny:hot@aaaaaaaaaaaa", "last_use_s": 10.0,
         "pinned": True, "stale": False},
        {"replica": "r1", "node": "127.0.0.3", "adapter": "maze-tiny:cold@bbbbbbbbbbbb", "last_use_s": None,
         "pinned": False, "stale": False}]


def test_cli_pin_where_unpin(placement, tmp_path):
    from serving.cli import main
    from serving.config import ServingConfig

    cfg = ServingConfig.shipped("embedded").model_dump(mode="json")
    cfg["adapters"] = placement.store.spec.model_dump(mode="json")
    path = tmp_path / "serving.yaml"
    path.write_text(json.dumps(cfg))
    run = CliRunner().invoke
    r = run(main, ["-c", str(path), "adapters", "pin", "hot"])
    assert r.exit_code == 0 and "pinned hot (1 of 8 slots per replica pinned)" in r.output, r.output
    r = run(main, ["-c", str(path), "adapters", "where"])
    assert r.exit_code == 0 and "no replica reports" in r.output
    r = run(main, ["-c", str(path), "adapters", "unpin", "warm"])
    assert r.exit_code != 0 and "'warm' is not pinned" in r.output
    r = run(main, ["-c", str(path), "adapters", "unpin", "hot"])
    assert r.exit_code == 0 and "pinned now: none" in r.output
