"""serving.placement.router's choice of replicas for an adapter request (pure), and its place in the app:
the LLM deployment's request router in the standard layout, Ray's own with 'affinity'."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from serving.app import llm_config_dicts
from serving.config import ServingConfig
from serving.placement import ROUTER_PATH
from serving.placement.router import ASSUMED_HOLDER_S, PICK_TRIES, AssumedHolders, spread_ranks

HOT = "maze-tiny:maze-grpo@b6e4ab3a3a67"


@dataclass(eq=False)
class Replica:
    """What the router reads of a running replica."""

    replica_id: str
    multiplexed_model_ids: set[str] = field(default_factory=set)


def ranks(replicas, loads: dict[str, int | None], threshold=4, model=HOT, assumed=None):
    return [[r.replica_id for r in rank]
            for rank in spread_ranks(model, replicas, lambda r: loads.get(r.replica_id), threshold, assumed)]


def test_an_idle_holder_keeps_the_adapter_no_other_replica_is_first():
    a, b, c = Replica("a", {HOT}), Replica("b"), Replica("c")
    got = ranks([a, b, c], {"a": 3, "b": 0, "c": 0})
    assert got[0] == ["a"]  # below the threshold: affinity, no needless load
    assert set(got[-1]) <= {"b", "c"}  # the others are only a fallback


def test_busy_holders_spread_to_the_least_busy_replica():
    a, b, c = Replica("a", {HOT}), Replica("b"), Replica("c")
    got = ranks([a, b, c], {"a": 4, "b": 2, "c": 1})
    assert got[0][0] == "c" and "a" in got[0]  # the least busy non-holder first, the holder may still win a tie


def test_spread_uses_every_holder_once_it_has_several():
    reps = [Replica(str(i), {HOT}) for i in range(2)] + [Replica("x")]
    seen = set()
    for _ in range(50):
        seen |= set(ranks(reps, {"0": 1, "1": 1, "x": 0})[0])
    assert seen == {"0", "1"}  # both holders get requests, the non-holder none in the first rank


def test_threshold_decides_when_to_spread():
    a, b = Replica("a", {HOT}), Replica("b")
    assert ranks([a, b], {"a": 7, "b": 0}, threshold=8)[0] == ["a"]
    assert ranks([a, b], {"a": 8, "b": 0}, threshold=8)[0][0] == "b"


def test_unknown_adapter_goes_to_the_replicas_with_fewest_adapters():
    a, b, c = Replica("a", {"m:x@1"}), Replica("b"), Replica("c", {"m:y@1", "m:z@1"})
    assert ranks([a, b, c], {}, model="m:new@1")[0] == ["b"]


def test_an_adapter_nobody_holds_goes_to_one_replica_from_every_router():
    """Until a replica's load is broadcast, each request for a cold adapter looks like the first: every
    router, in any order of replicas, must put the same one first, or the adapter loads twice."""
    reps = [Replica(f"r{i}") for i in range(4)]
    firsts = {ranks(order, {}, model="m:a@1")[0][0] for order in (reps, reps[::-1], reps[1:] + reps[:1])
              for _ in range(20)}
    assert len(firsts) == 1
    # and distinct adapters still spread over the emptiest replicas
    assert len({ranks(reps, {}, model=f"m:a{i}@1")[0][0] for i in range(40)}) == 4
    got = ranks(reps, {}, model="m:a@1")
    # the pick, tried again while Ray's probe of it times out (its deadline doubles per rank: a busy
    # host answers late, and the next rank would load the adapter a second time), then the fallbacks
    assert got[:PICK_TRIES] == [got[0]] * PICK_TRIES and len(got[0]) == 1 and len(got) == PICK_TRIES + 2


def test_a_routers_own_pick_counts_as_a_holder_until_the_broadcast():
    t = [0.0]
    assumed = AssumedHolders(clock=lambda: t[0])
    a, b = Replica("a"), Replica("b")
    first = spread_ranks("m:x@1", [a, b], lambda r: 0, 4)[0]
    assumed.note("m:x@1", [a, b], first)
    picked = first[0].replica_id
    other = "b" if picked == "a" else "a"
    # a replica with fewer adapters appears meanwhile: the pick still wins while it is idle
    (a if other == "a" else b).multiplexed_model_ids.clear()
    (a if picked == "a" else b).multiplexed_model_ids.add("m:y@1")
    assert ranks([a, b], {}, model="m:x@1", assumed=assumed.get("m:x@1", [a, b]))[0] == [picked]
    t[0] += ASSUMED_HOLDER_S + 1  # expired: back to the emptiest
    assert assumed.get("m:x@1", [a, b]) is None
    assumed.note("m:x@1", [a, b], first)
    (a if picked == "a" else b).multiplexed_model_ids.add("m:x@1")  # the broadcast came: no assumption needed
    assert assumed.get("m:x@1", [a, b]) is None


def test_unknown_queue_length_counts_as_idle():
    a, b = Replica("a", {HOT}), Replica("b")
    assert ranks([a, b], {"a": None, "b": 0})[0] == ["a"]


def test_large_ranks_are_sampled_to_two():
    reps = [Replica(str(i), {HOT}) for i in range(64)]
    assert all(len(rank) <= 2 for rank in ranks(reps, {}))


def _cfg(name: str, **routing) -> ServingConfig:
    d = ServingConfig.shipped(name).model_dump(mode="json")
    d["routing"].update(routing)
    return ServingConfig.model_validate(d)


def test_standard_layout_runs_the_spread_router_with_its_threshold():
    (llm,) = llm_config_dicts(_cfg("cluster", spread_threshold=6))
    router = llm["deployment_config"]["request_router_config"]
    assert router == {"request_router_class": ROUTER_PATH, "request_router_kwargs": {"spread_threshold": 6}}


@pytest.mark.parametrize("name,routing", [("cluster", {"policy": "affinity"}), ("embedded", {})])
def test_affinity_or_colocated_keeps_rays_router(name, routing):
    (llm,) = llm_config_dicts(_cfg(name, **routing))
    assert "request_router_config" not in llm["deployment_config"]


def test_router_path_names_the_class():
    import importlib

    module, _, attr = ROUTER_PATH.partition(":")
    assert hasattr(importlib.import_module(module), attr)
