"""Adapter-aware replica choice for the LLM deployment: a hot adapter spreads, a cold one stays put.

Ray Serve's default router (power of two choices with multiplexed affinity) sends a request for an
adapter only to the replicas that already hold it, and looks elsewhere only after its matching
timeout (1-2 s) passes with every holder's queue full (``max_ongoing_requests``, 64 here). A hot
adapter therefore lives on one replica while the others idle: one adapter carrying most of the
traffic is the common production case, and it would use one of N accelerators.

:class:`AdapterSpreadRouter` keeps the affinity while it is free and drops it when it costs:

* a request for an adapter goes to the least busy of the replicas holding it, as long as one of
  them has fewer than ``spread_threshold`` requests in flight (no needless loads at low load);
* once every holder is at or past the threshold, the request goes to the least busy replica of
  all, which loads the adapter if it lacks it: the adapter now has one more holder, and the
  affinity rule spreads its requests over all of them from then on;
* an adapter no replica holds goes to one of the replicas with the fewest adapters (as Ray does),
  the same one from every router: the pick is a rendezvous hash of the adapter and replica ids,
  tried again while its queue-length probe is slow before another replica loads the adapter;
* base-model requests keep Ray's power of two choices.

Which adapters a replica holds reaches the routers late: the replica reports a load to the controller,
which broadcasts it. Until it arrives, every request for a cold adapter looks like the first one; with
a random pick a turn-by-turn episode loads its adapter on a second replica about half the time. The
hash sends them all to one replica, and each router also takes its own last pick as a holder for
``ASSUMED_HOLDER_S`` (the ingress replica that sent the first request sees the same view sooner).

Queue lengths come from the router's own cache (refreshed by Ray's probes and by every request it
sends); a replica whose length is unknown counts as idle, and Ray probes it before sending.
Selection inside a rank stays Ray's: the lowest probed queue that accepts the request.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Sequence

from ray.serve.request_router import PendingRequest, RunningReplica

from serving.compat import PowerOfTwoChoicesRequestRouter

SAMPLE = 2  # replicas sampled from a large rank (power of two choices)
# Ray probes a rank's replicas for their queue lengths before sending, with a deadline that starts
# at 0.1 s and doubles on each rank that yields no replica. A picked replica that is slow to answer
# (a busy host) would otherwise pass a cold adapter to the next rank, which loads it a second time:
# the pick is tried this many times (0.1 + 0.2 + 0.4 s of probing) before the fallbacks.
PICK_TRIES = 3
ASSUMED_HOLDER_S = 10.0  # a load is broadcast within a second or two; a router's own pick stands in until then


def _rendezvous(model_id: str, replicas: Sequence[RunningReplica]) -> RunningReplica:
    # Stable across processes (Python's hash() is salted per process): every router picks the same.
    def score(r: RunningReplica) -> bytes:
        return hashlib.blake2b(f"{model_id}|{r.replica_id}".encode(), digest_size=8).digest()

    return max(replicas, key=score)


def _sample(replicas: Sequence[RunningReplica], k: int = SAMPLE) -> list[RunningReplica]:
    return list(replicas) if len(replicas) <= k else random.sample(list(replicas), k)


def spread_ranks(model_id: str, replicas: Sequence[RunningReplica], queue_len, threshold: int,
                 assumed_holder=None) -> list[list[RunningReplica]]:
    """The ranks of replicas to try for a request for ``model_id`` (pure: ``queue_len(replica)``
    gives a replica's requests in flight, None when unknown; ``assumed_holder`` is the id of a
    replica taken to hold the adapter though it has not said so yet).

    Holders below ``threshold`` first; when there are none, the least busy replicas of all (a new
    holder); an adapter nobody holds, the rendezvous pick among the replicas with the fewest
    adapters (``PICK_TRIES`` ranks of it); every later rank is a fallback for when the ones before
    it turn the request away or do not answer Ray's probe in time.
    """
    def holds(r: RunningReplica) -> bool:
        return model_id in r.multiplexed_model_ids or (assumed_holder is not None and r.replica_id == assumed_holder)

    holders = [r for r in replicas if holds(r)]
    others = [r for r in replicas if not holds(r)]
    if not holders:
        fewest = min(len(r.multiplexed_model_ids) for r in replicas)
        emptiest = [r for r in replicas if len(r.multiplexed_model_ids) == fewest]
        pick = _rendezvous(model_id, emptiest)
        return [*([pick] for _ in range(PICK_TRIES)), _sample(emptiest), _sample(replicas)]

    def load(r: RunningReplica) -> int:
        return queue_len(r) or 0

    idle_holders = [r for r in holders if load(r) < threshold]
    if idle_holders:
        return [_sample(idle_holders), _sample(holders), _sample(others)]
    # Every holder is busy: the least busy replica anywhere takes it (a holder can still win a tie).
    least = sorted(others, key=lambda r: (load(r), len(r.multiplexed_model_ids)))[:SAMPLE]
    return [least + _sample(holders), _sample(replicas)]


class AssumedHolders:
    """A router's own picks for adapters no replica has reported yet, each for ``ASSUMED_HOLDER_S``."""

    def __init__(self, clock=time.monotonic):
        self._clock, self._picks = clock, {}  # model id -> (replica id, until)

    def get(self, model_id: str, replicas: Sequence[RunningReplica]):
        """The replica id taken to hold ``model_id``, or None (none picked lately, or a holder reported)."""
        pick = self._picks.get(model_id)
        if pick is None or pick[1] < self._clock() or any(model_id in r.multiplexed_model_ids for r in replicas):
            self._picks.pop(model_id, None)
            return None
        return pick[0]

    def note(self, model_id: str, replicas: Sequence[RunningReplica], first_rank: Sequence[RunningReplica]) -> None:
        """Remember a lone first choice for an adapter no replica reports holding."""
        if len(first_rank) == 1 and not any(model_id in r.multiplexed_model_ids for r in replicas):
            self._picks[model_id] = (first_rank[0].replica_id, self._clock() + ASSUMED_HOLDER_S)


class AdapterSpreadRouter(PowerOfTwoChoicesRequestRouter):
    """Ray Serve request router of the LLM deployment (``request_router_config``); see the module."""

    def initialize_state(self, spread_threshold: int = 4, **kwargs) -> None:
        super().initialize_state(**kwargs)
        if spread_threshold < 1:
            raise ValueError(f"spread_threshold must be >= 1, got {spread_threshold}")
        self.spread_threshold = spread_threshold
        self.assumed = AssumedHolders()

    def _queue_len(self, replica: RunningReplica) -> int | None:
        return self.replica_queue_len_cache.get(replica.replica_id)

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None) -> list[list[RunningReplica]]:
        model_id = pending_request.metadata.multiplexed_model_id if pending_request is not None else ""
        if not model_id or not candidate_replicas:
            return await super().choose_replicas(candidate_replicas, pending_request)
        threshold = getattr(self, "spread_threshold", 4)
        ranks = spread_ranks(model_id, candidate_replicas, self._queue_len, threshold,
                             self.assumed.get(model_id, candidate_replicas))
        self.assumed.note(model_id, candidate_replicas, ranks[0])
        return [rank for rank in ranks if rank]


__all__ = ["AdapterSpreadRouter", "AssumedHolders", "spread_ranks"]
