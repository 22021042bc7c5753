"""The episode runner: episodes played turn by turn against a policy, with retries and outage
waits, and the records they leave.

:mod:`~agent.runner.episodes` is ``run_episodes_async`` (the one implementation) and its sync
shells; :mod:`~agent.runner.config` the typed runner settings (endpoint, retries, sampling);
:mod:`~agent.runner.policies` the :class:`Policy` seam (:class:`OpenAIPolicy`,
:class:`CallablePolicy`, the BFS solver); :mod:`~agent.runner.outage` waiting out an endpoint that
is briefly gone; :mod:`~agent.runner.records` the versioned episode and turn records.
"""

from agent.runner.config import (
    DEFAULT_MAX_TOKENS,
    ConfigModel,
    EndpointConfig,
    EnvId,
    History,
    ProtocolName,
    RetryPolicy,
    RunnerConfig,
    SamplingParams,
    parse_seeds,
)
from agent.runner.episodes import (
    EpisodeSpec,
    run_endpoint_async,
    run_episode,
    run_episode_async,
    run_episodes,
    run_episodes_async,
)
from agent.runner.outage import EndpointWaits
from agent.runner.policies import (
    EPISODE_SESSION,
    CallablePolicy,
    OpenAIPolicy,
    Policy,
    PolicyReply,
    bfs_policy,
    solver_reply,
)
from agent.runner.records import EpisodeRecord, StopReason, TurnRecord, is_scored, read_jsonl, write_jsonl

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "EPISODE_SESSION",
    "CallablePolicy",
    "ConfigModel",
    "EndpointConfig",
    "EndpointWaits",
    "EnvId",
    "EpisodeRecord",
    "EpisodeSpec",
    "History",
    "OpenAIPolicy",
    "Policy",
    "PolicyReply",
    "ProtocolName",
    "RetryPolicy",
    "RunnerConfig",
    "SamplingParams",
    "StopReason",
    "TurnRecord",
    "bfs_policy",
    "is_scored",
    "parse_seeds",
    "read_jsonl",
    "run_endpoint_async",
    "run_episode",
    "run_episode_async",
    "run_episodes",
    "run_episodes_async",
    "solver_reply",
    "write_jsonl",
]
