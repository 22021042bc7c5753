"""Where adapters live across LLM replicas: the spread router, pins and replica reports, the replica's agent.

:class:`~serving.placement.router.AdapterSpreadRouter` (the LLM deployment's Ray Serve request router) keeps an adapter's
requests on the replicas that hold it and spreads a hot one; :class:`PlacementStore` keeps pins
and each replica's report beside the adapter store's refs; :func:`run_placement` is the task of
an LLM replica (driven through the :class:`Replica` contract) that loads pinned adapters and reports what it holds; :mod:`~serving.placement.follow`
loads a name's new version ahead of its first request after a move through a colocated gateway. The
router loads Ray Serve's router internals on first use: building the app names it by :data:`ROUTER_PATH`.
"""

from serving.placement.agent import run_placement
from serving.placement.follow import preload_moved
from serving.placement.pins import PIN_REFRESH_S, PlacementStore, where_rows
from serving.placement.replica import Replica, ResidentAdapters

#: The router's import path, as Ray Serve's ``request_router_class`` takes it.
ROUTER_PATH = "serving.placement.router:AdapterSpreadRouter"


__all__ = ["PIN_REFRESH_S", "ROUTER_PATH", "PlacementStore", "Replica", "ResidentAdapters", "preload_moved",
           "run_placement", "where_rows"]
