"""The offline gate (``maze-eval gate NAME@VERSION``): promote a candidate version of an adapter name only
when it plays better than the version the name serves, on the same mazes, by an exact test whose
false-promotion rate is at most the name's ``alpha``.

:mod:`~evaluation.gate.sequential` is the test (pure): exact one-sided binomial on the seeds exactly
one version solved, looked at after fixed seed counts, alpha spent in proportion to seeds and the
boundaries computed exactly by dynamic programming. :mod:`~evaluation.gate.play` runs a gate: the
store's clearance (a candidate without passed parity is refused before anything is played), both
versions pinned by version through the gateway look by look, the decision recorded.
:mod:`~evaluation.gate.aliases` is where the store is asked: a gateway's management routes, or the
adapter store itself.
"""

from evaluation.gate.aliases import GateAliases, GatewayAliases, StoreAliases
from evaluation.gate.play import GateIncomplete, GateResult, LookRecord, gate, gate_async
from evaluation.gate.sequential import Design, Look, boundaries, judge, p_one_sided, promotion_probability

__all__ = ["Design", "GateAliases", "GateIncomplete", "GateResult", "GatewayAliases", "Look", "LookRecord",
           "StoreAliases", "boundaries", "gate", "gate_async", "judge", "p_one_sided", "promotion_probability"]
