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
* an adapter no replica holds goes to the replicas with the fewest adapters (as Ray does);
* base-model requests keep Ray's power of two choices.

Queue lengths come from the router's own cache (refreshed by Ray's probes and by every request it
sends); a replica whose length is unknown counts as idle, and Ray probes it before sending.
Selection inside a rank stays Ray's: the lowest probed queue that accepts the request.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from ray.serve._private.request_router.pow_2_router import PowerOfTwoChoicesRequestRouter
from ray.serve.request_router import PendingRequest, RunningReplica

SAMPLE = 2  # replicas sampled from a large rank (power of two choices)


def _sample(replicas: Sequence[RunningReplica], k: int = SAMPLE) -> list[RunningReplica]:
    return list(replicas) if len(replicas) <= k else random.sample(list(replicas), k)


def spread_ranks(model_id: str, replicas: Sequence[RunningReplica], queue_len, threshold: int
                 ) -> list[list[RunningReplica]]:
    """The ranks of replicas to try for a request for ``model_id`` (pure: ``queue_len(replica)``
    gives a replica's requests in flight, None when unknown).

    Holders below ``threshold`` first; when there are none, the least busy replicas of all (a new
    holder); an adapter nobody holds, the replicas with the fewest adapters; every rank after the
    first is a fallback for when the ones before it turn the request away.
    """
    holders = [r for r in replicas if model_id in r.multiplexed_model_ids]
    others = [r for r in replicas if model_id not in r.multiplexed_model_ids]
    if not holders:
        fewest = min(len(r.multiplexed_model_ids) for r in replicas)
        emptiest = [r for r in replicas if len(r.multiplexed_model_ids) == fewest]
        return [_sample(emptiest), _sample(replicas)]

    def load(r: RunningReplica) -> int:
        return queue_len(r) or 0

    idle_holders = [r for r in holders if load(r) < threshold]
    if idle_holders:
        return [_sample(idle_holders), _sample(holders), _sample(others)]
    # Every holder is busy: the least busy replica anywhere takes it (a holder can still win a tie).
    least = sorted(others, key=lambda r: (load(r), len(r.multiplexed_model_ids)))[:SAMPLE]
    return [least + _sample(holders), _sample(replicas)]


class AdapterSpreadRouter(PowerOfTwoChoicesRequestRouter):
    """Ray Serve request router of the LLM deployment (``request_router_config``); see the module."""

    def initialize_state(self, spread_threshold: int = 4, **kwargs) -> None:
        super().initialize_state(**kwargs)
        if spread_threshold < 1:
            raise ValueError(f"spread_threshold must be >= 1, got {spread_threshold}")
        self.spread_threshold = spread_threshold

    def _queue_len(self, replica: RunningReplica) -> int | None:
        return self.replica_queue_len_cache.get(replica.replica_id)

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None) -> list[list[RunningReplica]]:
        model_id = pending_request.metadata.multiplexed_model_id if pending_request is not None else ""
        if not model_id or not candidate_replicas:
            return await super().choose_replicas(candidate_replicas, pending_request)
        threshold = getattr(self, "spread_threshold", 4)
        return [rank for rank in spread_ranks(model_id, candidate_replicas, self._queue_len, threshold) if rank]


__all__ = ["AdapterSpreadRouter", "spread_ranks"]
