"""Waiting out an endpoint that is briefly gone: a replica restarting, a rolling update, a rate limit.

A connection failure, a request the endpoint did not answer in time, a 502/503/504 or a 429 says nothing about the request: the same request will
succeed once the endpoint is back or the limit resets. Counting such failures in attempts (a few
retries with short backoffs) gives up within seconds, long before a gateway replica restarts
(tens of seconds), and an evaluation would record episodes as errored that a wait would have
saved. So these failures are retried for as long as ``RetryPolicy.wait_budget_s`` allows per
request, and every episode of a run shares one :class:`EndpointWaits`: it knows whether the run is
waiting right now (progress lines show it) and adds up the time spent waiting (reports show it).
Where the endpoint has a readiness probe (the gateway's ``/ready``), one poll of it, shared by all
waiting episodes, tells when to send again, instead of every episode hammering the endpoint.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from agent.errors import PolicyError

UNAVAILABLE_STATUSES = frozenset({502, 503, 504})
RATE_LIMITED = 429


def wait_kind(exc: PolicyError) -> str | None:
    """'unavailable' (no connection or no answer in time: no status; 502/503/504), 'rate_limited'
    (429), or None: a failure that is counted in attempts instead (408, 409, 500, a reply without
    choices)."""
    if not exc.transient:
        return None
    if exc.status_code == RATE_LIMITED:
        return "rate_limited"
    return "unavailable" if exc.status_code is None or exc.status_code in UNAVAILABLE_STATUSES else None


@dataclass
class EndpointWaits:
    """One run's waits for its endpoint, shared by its concurrent episodes.

    ``waiting_since`` is set while at least one request waits (an outage); ``waited_s`` adds up the
    outages' lengths (overlapping waits of several episodes count once); ``outages`` counts them;
    ``rate_limited`` counts the 429 answers waited out.
    """

    waiting_since: float | None = None
    waited_s: float = 0.0
    outages: int = 0
    rate_limited: int = 0
    _waiting: int = 0

    def note(self, kind: str) -> None:
        """One answer of ``kind`` that a request waits out."""
        if kind == "rate_limited":
            self.rate_limited += 1

    def begin(self) -> None:
        """A request starts waiting (it ends with :meth:`end`, once it got through or gave up)."""
        if self._waiting == 0:
            self.waiting_since = time.monotonic()
            self.outages += 1
        self._waiting += 1

    def end(self) -> None:
        self._waiting -= 1
        if self._waiting == 0 and self.waiting_since is not None:
            self.waited_s += time.monotonic() - self.waiting_since
            self.waiting_since = None

    def current_s(self) -> float | None:
        """Seconds the current outage has lasted; None when nothing waits."""
        return None if self.waiting_since is None else time.monotonic() - self.waiting_since


__all__ = ["EndpointWaits", "UNAVAILABLE_STATUSES", "wait_kind"]
