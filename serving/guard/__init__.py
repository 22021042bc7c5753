"""The live guard: a running canary judged on the outcomes of the sessions it served.

Clients report one outcome per session (``POST /v1/outcomes``: the agent's runner does after every
episode it plays through the gateway). :mod:`~serving.guard.ledger` pairs each canary outcome with
a stable one that ended about when it did; :mod:`~serving.guard.evidence` tests the pairs where
exactly one arm solved its maze with anytime-valid e-values, so the verdict may be read after every
outcome at a false-rollback (and false-promotion) rate of at most the policy's alpha;
:mod:`~serving.guard.watch` keeps the ledger with the name in the adapter store and carries a
verdict out as a conditional move of the name's ref: a canary found worse, or tripping a guard rail
(errors, latency), is rolled back by itself; one found better is promoted where the name's policy
(``adapters.guard``) allows, else the finding is recorded. Uses serving's adapters, config, errors
and metrics.
"""

from serving.guard.evidence import e_better, e_worse
from serving.guard.ledger import Outcome, Verdict
from serving.guard.watch import GUARD_PREFIX, CanaryGuard, Counted

__all__ = ["GUARD_PREFIX", "CanaryGuard", "Counted", "Outcome", "Verdict", "e_better", "e_worse"]
