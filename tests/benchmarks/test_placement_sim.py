"""The placement simulation (benchmarks/support/placement_model.py, placement_sim.py): its invariants and both
routing policies' decisions, on small workloads (seconds, no stack)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import placement_sim
from benchmarks.support.placement_model import HOT, Cluster, EngineCosts, Policy, Requests, Simulation, make_requests

COSTS = EngineCosts(step_s=0.01, decode_s=0.002, prefill_token_s=2e-5, lora_factor=1.2, adapter_step_s=5e-4,
                    cold_load_s=0.5, load_stall_s=0.05)
SIZES = np.array([[120, 9], [300, 10], [310, 12]])
POLICIES = [Policy("ray"), Policy("gateway", spread_threshold=2), Policy("gateway", spread_threshold=8)]


def workload(n=20000, rate=100.0, adapters=200, hot_share=0.5, seed=1, warmup=0.3):
    return make_requests(n, rate, n_adapters=adapters, zipf_s=1.1, hot_share=hot_share, sizes=SIZES,
                         ramp_share=0.2, warmup_share=warmup, seed=seed)


def simulate(policy, reqs, replicas=16, max_loras=4, seed=0):
    return Simulation(Cluster(replicas=replicas, max_loras=max_loras), policy, COSTS, reqs, seed=seed).run()


@pytest.mark.parametrize("policy", POLICIES + [Policy("gateway", spread_threshold=4, pin_hot=True)], ids=str)
def test_every_request_completes_once_and_no_faster_than_alone(policy):
    reqs = workload()
    sim = simulate(policy, reqs)
    n = len(reqs.arrival_s)
    assert not np.isnan(sim.done_s).any()
    assert sum(r.served for r in sim.reps) == n
    assert all(r.ongoing == 0 and not r.batch and not r.loading for r in sim.reps)
    alone = np.array([COSTS.alone_s(p, d) for p, d in zip(reqs.prompt_tokens, reqs.completion_tokens)])
    lat = sim.latency_s()
    assert (lat >= alone * (1 - 1e-9)).all()  # a batch never makes a request faster than running alone
    # A request that started a load waited all of it; one that found its adapter loading waited less.
    assert (lat[sim.loader] >= COSTS.cold_load_s + alone[sim.loader] * (1 - 1e-9)).all()
    assert sim.loader.sum() == sum(r.loads for r in sim.reps) and (sim.cold >= sim.loader).all()
    assert all(len(r.resident) <= 4 for r in sim.reps)  # LRU keeps every replica within max_loras
    assert sum(r.loads for r in sim.reps) >= sim.measured_loads > 0


@pytest.mark.parametrize("policy", POLICIES, ids=str)
def test_one_adapter_on_ample_replicas_loads_once_when_holders_are_idle(policy):
    # Arrivals far apart (2 s) next to a ~0.2 s request: the holder is always idle, so no policy has a
    # reason to load the adapter anywhere else.
    reqs = workload(n=300, rate=0.5, hot_share=1.0)
    sim = simulate(policy, reqs, replicas=32)
    assert sum(r.loads for r in sim.reps) == 1
    assert sim.measured_loads == 0
    assert sum(HOT in r.resident for r in sim.reps) == 1


@pytest.mark.parametrize("policy", POLICIES, ids=str)
def test_one_adapter_under_load_has_no_cold_loads_after_warm_up(policy):
    # No other adapter evicts it: every copy loaded during the ramp stays, so the measured part has none.
    reqs = workload(n=20000, rate=150.0, hot_share=1.0, warmup=0.5)
    sim = simulate(policy, reqs, replicas=32)
    assert sim.measured_loads == 0
    assert sum(r.evictions for r in sim.reps) == 0


def test_gateway_spreads_a_busy_hot_adapter_where_ray_keeps_it_on_few_replicas():
    # 25 requests/s of ~0.14 s each: one replica copes with ~10 in flight (far below max_ongoing, so Ray
    # keeps them there); the gateway adds replicas once 2 are in flight.
    reqs = workload(n=8000, rate=25.0, hot_share=1.0, warmup=0.5)
    ray = simulate(Policy("ray"), reqs, replicas=32)
    gw = simulate(Policy("gateway", spread_threshold=2), reqs, replicas=32)
    holders = lambda sim: sum(HOT in r.resident for r in sim.reps)  # noqa: E731
    assert holders(ray) == 1 and holders(gw) >= 4
    m = np.arange(len(reqs.arrival_s)) >= reqs.measured_from
    assert np.percentile(gw.latency_s()[m], 99) < 0.5 * np.percentile(ray.latency_s()[m], 99)


def test_pinned_hot_adapter_is_never_evicted_nor_loaded():
    reqs = workload(adapters=500)
    sim = simulate(Policy("gateway", spread_threshold=4, pin_hot=True), reqs, max_loras=3)
    assert all(HOT in r.resident for r in sim.reps)
    hot = reqs.adapter == HOT
    assert not sim.cold[hot].any()
    assert sum(r.evictions for r in sim.reps) > 0  # the other slots did churn


def test_same_seed_same_figures_other_seed_other_figures():
    def figures(seed):
        sim = simulate(Policy("ray"), workload(seed=seed), seed=seed)
        return sim.done_s.tolist(), sim.placed.tolist(), sim.measured_loads

    assert figures(3) == figures(3)
    assert figures(3) != figures(4)


def _bare(replicas=4, max_ongoing=64):
    reqs = Requests(arrival_s=np.array([0.0]), adapter=np.array([7]), prompt_tokens=np.array([100]),
                    completion_tokens=np.array([10]), measured_from=0)
    return reqs, Cluster(replicas=replicas, max_loras=2, max_ongoing=max_ongoing)


def _state(sim, ongoing, holders_of_7, view_count):
    for r, q in enumerate(ongoing):
        sim.reps[r].ongoing = q
        sim.ongoing[r] = q
    sim.view = {7: set(holders_of_7)} if holders_of_7 else {}
    sim.view_count[:] = view_count


def test_gateway_choice_keeps_affinity_below_the_threshold_and_spreads_above_it():
    reqs, cluster = _bare()
    sim = Simulation(cluster, Policy("gateway", spread_threshold=4), COSTS, reqs)
    _state(sim, [3, 0, 1, 2], holders_of_7=[0], view_count=[2, 1, 2, 2])
    assert sim._choose_gateway(0) == 0  # the holder has 3 < 4 in flight: no load elsewhere
    _state(sim, [4, 0, 0, 2], holders_of_7=[0], view_count=[2, 2, 1, 2])
    assert sim._choose_gateway(0) == 2  # busy holder: the least loaded, the one with a free slot first
    _state(sim, [4, 1, 1, 1], holders_of_7=[0], view_count=[2, 2, 2, 1])
    assert sim._choose_gateway(0) == 3  # all full of adapters or not: load first, then a free slot
    _state(sim, [0, 0, 0, 0], holders_of_7=[], view_count=[2, 2, 2, 2])
    assert sim._choose_gateway(0) in {0, 1, 2, 3}


def test_ray_choice_follows_multiplex_routing():
    reqs, cluster = _bare(max_ongoing=8)
    sim = Simulation(cluster, Policy("ray"), COSTS, reqs)
    from benchmarks.support.placement_model import _Route

    _state(sim, [7, 0, 0, 0], holders_of_7=[0], view_count=[2, 1, 2, 2])
    route = _Route(started=0.0)
    assert sim._choose_ray(0, route) == 0  # a holder under max_ongoing takes it, however busy
    _state(sim, [8, 0, 0, 0], holders_of_7=[0], view_count=[2, 1, 2, 2])
    route = _Route(started=0.0)
    assert sim._choose_ray(0, route) is None  # the only holder is full: this try fails
    assert sim._choose_ray(0, route) == 1  # the next try goes to the replica with the fewest models
    sim.now = 5.0  # past the matching timeout: once more the fewest, then all replicas
    route = _Route(started=0.0, tried_first=True)
    assert sim._choose_ray(0, route) == 1
    assert route.tried_fewest


def test_quick_run_writes_json_and_plot(tmp_path):
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"fit": {k: getattr(COSTS, k) for k in COSTS.__dataclass_fields__},
                               "workload_sizes": SIZES.tolist()}))
    out = tmp_path / "sim.json"
    assert placement_sim.main(["--quick", "--calibration", str(cal), "--out", str(out), "--thresholds", "2", "8",
                               "--pinned-threshold", "-1", "--min-requests", "3000",
                               "--requests-per-replica", "50"]) == 0
    result = json.loads(out.read_text())
    assert set(result["by_replicas"]) == {"16", "64"}
    runs = result["by_replicas"]["64"]["runs"]
    assert set(runs) == {"ray", "gateway_t2", "gateway_t8"}
    assert result["by_replicas"]["64"]["over_ray"]["gateway_t2"]["hot_p99"] == pytest.approx(
        runs["gateway_t2"]["latency"]["hot"]["p99_s"] / runs["ray"]["latency"]["hot"]["p99_s"], abs=1e-3)
    assert result["calibration"]["cold_load_s"] == COSTS.cold_load_s
    sens = result["sensitivity"]
    assert set(sens["ray_max_ongoing_8"]["runs"]) == {"ray", "ray_max_ongoing_8"}
    assert sens["no_load_stall"]["runs"]["ray"]["latency"] != runs["ray"]["latency"]  # same requests, other costs
    assert (tmp_path / "sim.png").stat().st_size > 10_000


def test_a_missing_or_malformed_calibration_is_a_clear_error(tmp_path, capsys):
    assert placement_sim.main(["--quick", "--calibration", str(tmp_path / "none.json"),
                               "--out", str(tmp_path / "o.json")]) == 2
    assert "run benchmarks/placement_calibrate.py first" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"fit": {"step_s": 0.01}, "workload_sizes": [[1, 1]]}))
    assert placement_sim.main(["--quick", "--calibration", str(bad), "--out", str(tmp_path / "o.json")]) == 2
    assert "not a calibration file" in capsys.readouterr().err


def test_engine_timing_on_one_replica_cold_load_batch_and_stall():
    from dataclasses import replace

    # t=0: adapter 1's first request loads it (0.5 s), then runs alone; t=1: a long request for adapter 1
    # runs alone until adapter 2's request (t=1.2) starts a load whose landing pauses the engine.
    reqs = Requests(arrival_s=np.array([0.0, 1.0, 1.2]), adapter=np.array([1, 1, 2]),
                    prompt_tokens=np.array([100, 100, 100]), completion_tokens=np.array([10, 200, 10]),
                    measured_from=0)
    runs = {stall: Simulation(Cluster(replicas=1), Policy("ray"), replace(COSTS, load_stall_s=stall), reqs).run()
            for stall in (0.0, 0.3)}
    lat = {stall: sim.latency_s() for stall, sim in runs.items()}
    assert lat[0.0][0] == pytest.approx(COSTS.cold_load_s + COSTS.alone_s(100, 10))
    assert runs[0.0].loader.tolist() == [True, False, True]
    # The long request shared its steps with the short one for a while: slower than alone, and the
    # stall added its whole length to it.
    assert lat[0.0][1] > COSTS.alone_s(100, 200)
    assert lat[0.3][1] == pytest.approx(lat[0.0][1] + 0.3)
