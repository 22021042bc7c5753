"""A discrete-event model of LoRA adapter placement over many LLM replicas (``benchmarks/placement_sim.py``).

Each replica is a continuous-batching engine. A step advances every running request by one token
and takes ``step_s + sum of the running rows' per-step costs + adapter_step_s per distinct adapter
in the batch``; a request needs as many steps as it has completion tokens, and its prompt's prefill
is spread over those steps (``prefill_token_s * prompt_tokens / completion_tokens`` per step), so
requests in a batch progress together and a replica's state changes only when one joins or leaves
(the engine is simulated per event, not per step). A request for an adapter the replica does not
hold starts a load: it waits ``cold_load_s`` (requests for the same adapter on that replica wait for
the same load), the engine pauses ``load_stall_s`` when the load lands, and past ``max_loras`` the
least recently used adapter that is neither loading nor pinned is evicted.

The router sees each replica's in-flight count exactly (one router; Serve's queue-length cache is
exact for the requests it sends) and which adapters a replica holds ``view_delay_s`` late (Serve's
replicas push their model ids, loading ones included, every 0.1 s). A replica takes a request only
while its in-flight count is below ``max_ongoing``; a request no candidate takes is tried again
with Serve's backoff (the first retry at once, then 25 ms doubling up to 0.5 s). Two policies:

- ``ray``: Serve's ``PowerOfTwoChoicesRequestRouter`` with ``MultiplexMixin.apply_multiplex_routing``
  (Ray 2.60): within the matching timeout (1 s, drawn uniform in [1, 2] s at each check) the first
  try goes to two random replicas holding the adapter, every later try to two random replicas among
  those with the fewest adapters (an adapter held nowhere goes there at once, unless a concurrent
  request already fell back for it); past the timeout, one more try among the fewest, then all.
- ``gateway``: two random holders while the least loaded holder has fewer than ``spread_threshold``
  requests in flight; otherwise (or when no replica holds it) the least loaded replica of all,
  ties broken by a free adapter slot, then the fewest adapters, then at random: that replica loads it.
  With ``pin_hot`` the hot adapter is resident on every replica from the start and never evicted.
"""

from __future__ import annotations

import heapq
import random
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

__all__ = ["HOT", "Cluster", "EngineCosts", "Policy", "Requests", "Simulation", "make_requests"]

RETRY, DONE, LOADED, VIEW_ADD, VIEW_DEL, MARK = range(6)  # event kinds (arrivals come from the sorted array)
HOT = 0  # adapter id of the hot adapter; Zipf rank k is adapter id k


@dataclass(frozen=True)
class EngineCosts:
    """A replica engine's time costs (seconds), measured on the local stack."""

    step_s: float  # fixed time of one engine step
    decode_s: float  # per running request per step (base model)
    prefill_token_s: float  # per prompt token, spread over the request's steps
    lora_factor: float  # per-step cost of an adapter request relative to a base one
    adapter_step_s: float  # per distinct adapter in a step
    cold_load_s: float  # a request waits this long for its adapter to load
    load_stall_s: float  # the engine pauses this long when a load lands

    def row_cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """Per-step cost of one adapter request in the batch."""
        return self.decode_s * self.lora_factor + self.prefill_token_s * prompt_tokens / completion_tokens

    def alone_s(self, prompt_tokens: int, completion_tokens: int) -> float:
        """Latency of one adapter request alone on a replica that holds its adapter."""
        return completion_tokens * (self.step_s + self.adapter_step_s + self.row_cost(prompt_tokens, completion_tokens))


@dataclass(frozen=True)
class Cluster:
    """Replicas and Serve's routing constants."""

    replicas: int
    max_loras: int = 8
    max_ongoing: int = 64
    view_delay_s: float = 0.1
    match_timeout_s: float = 1.0
    backoff_initial_s: float = 0.025
    backoff_max_s: float = 0.5


@dataclass(frozen=True)
class Policy:
    """How adapter requests are routed."""

    kind: Literal["ray", "gateway"]
    spread_threshold: int = 4  # gateway only
    pin_hot: bool = False  # the hot adapter resident on every replica from the start, never evicted

    @property
    def label(self) -> str:
        name = "ray" if self.kind == "ray" else f"gateway_t{self.spread_threshold}"
        return name + ("_pinned" if self.pin_hot else "")


@dataclass(frozen=True)
class Requests:
    """The offered requests, in arrival order."""

    arrival_s: np.ndarray
    adapter: np.ndarray  # 0 = the hot adapter, k = Zipf rank k
    prompt_tokens: np.ndarray
    completion_tokens: np.ndarray
    measured_from: int  # requests before this index are warm-up


def make_requests(n: int, rate_per_s: float, *, n_adapters: int, zipf_s: float, hot_share: float,
                  sizes: np.ndarray, ramp_share: float, warmup_share: float, seed: int) -> Requests:
    """``n`` Poisson arrivals whose rate ramps linearly from 0 to ``rate_per_s`` over the first
    ``ramp_share`` of them (traffic grows, as after a deploy) and stays there; each for the hot adapter
    with probability ``hot_share``, else for Zipf(``zipf_s``) rank k of ``n_adapters``; prompt and
    completion sizes drawn from ``sizes`` (rows of measured [prompt, completion] tokens)."""
    rng = np.random.default_rng(seed)
    work = np.cumsum(rng.exponential(1.0, n))  # unit-rate arrival epochs
    ramp_work = ramp_share * n
    ramp_s = 2 * ramp_work / rate_per_s
    t = np.where(work < ramp_work, np.sqrt(2 * ramp_s * np.minimum(work, ramp_work) / rate_per_s),
                 ramp_s + (work - ramp_work) / rate_per_s)
    ranks = np.arange(1, n_adapters + 1)
    p = ranks ** -zipf_s
    zipf = rng.choice(ranks, size=n, p=p / p.sum())
    adapter = np.where(rng.random(n) < hot_share, HOT, zipf)
    pick = rng.integers(0, len(sizes), n)
    return Requests(arrival_s=t, adapter=adapter.astype(np.int64), prompt_tokens=sizes[pick, 0].astype(np.int64),
                    completion_tokens=sizes[pick, 1].astype(np.int64), measured_from=int(warmup_share * n))


class Replica:
    """One engine: its batch on a virtual clock of steps, its adapters, its counters."""

    __slots__ = ("ongoing", "v", "last_t", "pause_until", "batch", "cost", "groups", "resident", "loading",
                 "pinned", "version", "busy", "loads", "evictions", "served")

    def __init__(self) -> None:
        self.ongoing = 0  # requests taken and not finished (running or waiting for a load)
        self.v = 0.0  # steps done since start
        self.last_t = 0.0
        self.pause_until = 0.0
        self.batch: list[tuple[float, int]] = []  # heap of (step count at which it finishes, request)
        self.cost = 0.0  # sum of the running requests' per-step costs
        self.groups: dict[int, int] = {}  # adapter -> running requests
        self.resident: OrderedDict[int, None] = OrderedDict()  # least recently used first
        self.loading: dict[int, list[int]] = {}  # adapter -> requests waiting for its load
        self.pinned: set[int] = set()
        self.version = 0  # invalidates scheduled completions when the batch changes
        self.busy = 0.0  # seconds with a non-empty batch
        self.loads = self.evictions = self.served = 0


@dataclass
class _Route:
    """Serve's per-request routing context."""

    started: float
    tried_first: bool = False
    tried_fewest: bool = False
    failures: int = 0


@dataclass
class Simulation:
    """One run: ``requests`` through ``cluster`` under ``policy``."""

    cluster: Cluster
    policy: Policy
    costs: EngineCosts
    requests: Requests
    seed: int = 0
    reps: list[Replica] = field(init=False)

    def __post_init__(self) -> None:
        n_rep = self.cluster.replicas
        self.rnd = random.Random(self.seed)
        self.reps = [Replica() for _ in range(n_rep)]
        self.ongoing = np.zeros(n_rep, np.int64)  # mirror of Replica.ongoing for vector picks
        self.view_count = np.zeros(n_rep, np.int64)  # adapters each replica holds, as the router sees it
        self.view: dict[int, set[int]] = {}  # adapter -> replicas holding it, as the router sees it
        self.fallback: set[int] = set()  # Serve's _multiplexed_model_id_fallback_match
        self.heap: list[tuple] = []
        self.seq = 0
        self.now = 0.0
        n = len(self.requests.arrival_s)
        self.done_s = np.full(n, np.nan)
        self.cold = np.zeros(n, bool)  # waited for a load
        self.loader = np.zeros(n, bool)  # started a load
        self.placed = np.full(n, -1, np.int64)
        self.tries = np.zeros(n, np.int64)
        self.measured_loads = 0
        self.window: list[list[float]] = []  # busy seconds per replica at the window's start and end
        self.row_cost = [self.costs.row_cost(p, d) for p, d in
                         zip(self.requests.prompt_tokens.tolist(), self.requests.completion_tokens.tolist())]
        self.steps = self.requests.completion_tokens.tolist()
        self.adapters = self.requests.adapter.tolist()
        self.routes: dict[int, _Route] = {}

    # -- events -----------------------------------------------------------------------------------
    def push(self, t: float, kind: int, a: int, b: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, a, b))

    def run(self) -> Simulation:
        """Play every request to completion."""
        arrivals = self.requests.arrival_s.tolist()
        if self.policy.pin_hot:
            for r, rep in enumerate(self.reps):
                rep.resident[HOT] = None
                rep.pinned.add(HOT)
                self._view_add(HOT, r)
        start = self.requests.measured_from
        self.push(arrivals[start] if start < len(arrivals) else 0.0, MARK, 0)
        self.push(arrivals[-1], MARK, 1)
        nxt = 0  # arrivals are merged in from the sorted array, not pushed all at once
        heap = self.heap
        while heap or nxt < len(arrivals):
            if nxt < len(arrivals) and (not heap or arrivals[nxt] <= heap[0][0]):
                self.now = arrivals[nxt]
                self.routes[nxt] = _Route(started=self.now)
                self._route(nxt)
                nxt += 1
                continue
            t, _, kind, a, b = heapq.heappop(heap)
            self.now = t
            if kind == DONE:
                if b == self.reps[a].version:
                    self._complete(a)
            elif kind == RETRY:
                self._route(a)
            elif kind == LOADED:
                self._loaded(a, b)
            elif kind == VIEW_ADD:
                self._view_add(a, b)
            elif kind == VIEW_DEL:
                self._view_del(a, b)
            else:
                self._mark()
        return self

    def _mark(self) -> None:
        for rep in self.reps:
            self._advance(rep)
        self.window.append([rep.busy for rep in self.reps])

    def _view_add(self, adapter: int, r: int) -> None:
        self.view.setdefault(adapter, set()).add(r)
        self.view_count[r] += 1

    def _view_del(self, adapter: int, r: int) -> None:
        self.view[adapter].discard(r)
        self.view_count[r] -= 1

    # -- routing ----------------------------------------------------------------------------------
    def _route(self, i: int) -> None:
        """Try to place request ``i``; on failure schedule the next try with Serve's backoff."""
        ctx = self.routes[i]
        while True:
            self.tries[i] += 1
            r = self._choose_ray(i, ctx) if self.policy.kind == "ray" else self._choose_gateway(i)
            if r is not None:
                del self.routes[i]
                self._admit(i, r)
                return
            ctx.failures += 1
            if ctx.failures > 1:  # Serve retries at once after the first failure, then backs off
                delay = min(self.cluster.backoff_initial_s * 2 ** (ctx.failures - 2), self.cluster.backoff_max_s)
                self.push(self.now + delay, RETRY, i)
                return

    def _accepting(self, cands) -> int | None:
        """Serve's power of two choices: two random candidates, the less loaded that accepts."""
        n = len(cands)
        if n == 0:
            return None
        if n <= 2:
            pair = [int(r) for r in cands]
            if n == 2 and self.rnd.getrandbits(1):  # Serve shuffles a pair too: ties go either way
                pair.reverse()
        else:
            j, k = self.rnd.randrange(n), self.rnd.randrange(n - 1)
            pair = [int(cands[j]), int(cands[k + (k >= j)])]
        best, best_q = None, self.cluster.max_ongoing
        for r in pair:
            q = self.reps[r].ongoing
            if q < best_q:
                best, best_q = r, q
        return best

    def _fewest(self) -> np.ndarray:
        return np.flatnonzero(self.view_count == self.view_count.min())

    def _choose_ray(self, i: int, ctx: _Route) -> int | None:
        adapter = self.adapters[i]
        timeout = self.rnd.uniform(self.cluster.match_timeout_s, 2 * self.cluster.match_timeout_s)
        if self.now - ctx.started < timeout:
            holders = self.view.get(adapter)
            if (not holders and adapter not in self.fallback) or ctx.tried_first:
                cands = self._fewest()
                self.fallback.add(adapter)
            else:
                if holders:
                    self.fallback.discard(adapter)
                cands = list(holders) if holders else []
            ctx.tried_first = True
        elif not ctx.tried_fewest:
            cands = self._fewest()
            ctx.tried_fewest = True
        else:
            cands = range(self.cluster.replicas)
        return self._accepting(cands)

    def _choose_gateway(self, i: int) -> int | None:
        adapter = self.adapters[i]
        holders = self.view.get(adapter)
        if holders:
            reps = self.reps
            if min(reps[r].ongoing for r in holders) < self.policy.spread_threshold:
                return self._accepting(list(holders))
        return self._least_loaded()

    def _least_loaded(self) -> int | None:
        """Least in flight, then a free slot, then fewest adapters, then at random; None if all are full."""
        vc = self.view_count
        key = self.ongoing * 4096 + (vc >= self.cluster.max_loras) * 2048 + vc
        best = np.flatnonzero(key == key.min())
        r = int(best[self.rnd.randrange(len(best))]) if len(best) > 1 else int(best[0])
        return r if self.reps[r].ongoing < self.cluster.max_ongoing else None

    # -- replicas ---------------------------------------------------------------------------------
    def _admit(self, i: int, r: int) -> None:
        rep = self.reps[r]
        rep.ongoing += 1
        self.ongoing[r] += 1
        self.placed[i] = r
        adapter = self.adapters[i]
        if adapter in rep.loading:
            rep.loading[adapter].append(i)
            self.cold[i] = True
            rep.resident.move_to_end(adapter)
        elif adapter in rep.resident:
            rep.resident.move_to_end(adapter)
            self._advance(rep)
            self._join(rep, i)
            self._reschedule(r)
        else:
            self._start_load(r, adapter, i)

    def _start_load(self, r: int, adapter: int, i: int) -> None:
        rep = self.reps[r]
        self._trim(r, self.cluster.max_loras - 1)
        rep.resident[adapter] = None
        rep.loading[adapter] = [i]
        rep.loads += 1
        self.cold[i] = self.loader[i] = True
        if i >= self.requests.measured_from:
            self.measured_loads += 1
        self.push(self.now + self.costs.cold_load_s, LOADED, r, adapter)
        self.push(self.now + self.cluster.view_delay_s, VIEW_ADD, adapter, r)

    def _trim(self, r: int, keep: int) -> None:
        """Evict least recently used adapters, neither loading nor pinned, down to ``keep``; while all
        are loading or pinned the replica holds more than its slots (until the next load lands)."""
        rep = self.reps[r]
        while len(rep.resident) > keep:
            victim = next((a for a in rep.resident if a not in rep.loading and a not in rep.pinned), None)
            if victim is None:
                return
            del rep.resident[victim]
            rep.evictions += 1
            self.push(self.now + self.cluster.view_delay_s, VIEW_DEL, victim, r)

    def _loaded(self, r: int, adapter: int) -> None:
        rep = self.reps[r]
        self._advance(rep)
        waiting = rep.loading.pop(adapter)
        self._trim(r, self.cluster.max_loras)
        if self.costs.load_stall_s > 0:
            rep.pause_until = max(rep.pause_until, self.now) + self.costs.load_stall_s
        for i in waiting:
            self._join(rep, i)
        self._reschedule(r)

    def _step_s(self, rep: Replica) -> float:
        return self.costs.step_s + rep.cost + self.costs.adapter_step_s * len(rep.groups)

    def _advance(self, rep: Replica) -> None:
        """Bring the replica's step clock and busy time up to now."""
        if rep.batch:
            rep.busy += self.now - rep.last_t
            start = max(rep.last_t, rep.pause_until)
            if self.now > start:
                rep.v += (self.now - start) / self._step_s(rep)
        rep.last_t = self.now

    def _join(self, rep: Replica, i: int) -> None:
        heapq.heappush(rep.batch, (rep.v + self.steps[i], i))
        rep.cost += self.row_cost[i]
        a = self.adapters[i]
        rep.groups[a] = rep.groups.get(a, 0) + 1

    def _reschedule(self, r: int) -> None:
        rep = self.reps[r]
        rep.version += 1
        if rep.batch:
            start = max(self.now, rep.pause_until)
            self.push(start + (rep.batch[0][0] - rep.v) * self._step_s(rep), DONE, r, rep.version)

    def _complete(self, r: int) -> None:
        rep = self.reps[r]
        self._advance(rep)
        rep.v = max(rep.v, rep.batch[0][0])
        while rep.batch and rep.batch[0][0] <= rep.v + 1e-9:
            _, i = heapq.heappop(rep.batch)
            rep.cost -= self.row_cost[i]
            a = self.adapters[i]
            left = rep.groups[a] - 1
            if left:
                rep.groups[a] = left
            else:
                del rep.groups[a]
            rep.ongoing -= 1
            self.ongoing[r] -= 1
            rep.served += 1
            self.done_s[i] = self.now
        if not rep.batch:
            rep.cost = 0.0  # no float drift across idle periods
        self._reschedule(r)

    # -- results ----------------------------------------------------------------------------------
    def busy_in_window(self) -> np.ndarray:
        """Busy seconds of each replica between the first measured arrival and the last arrival."""
        return np.asarray(self.window[1]) - np.asarray(self.window[0])

    def latency_s(self) -> np.ndarray:
        return self.done_s - self.requests.arrival_s
