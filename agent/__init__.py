"""maze-gateway agent: the VisGym-compatible maze environment, prompt protocol and episode runner.

Importing the package registers ``maze_2d/simple``, ``maze_2d/easy`` and ``maze_2d/hard`` with
gymnasium (those not already registered: with VisGym installed as ``gymnasium``, its own
``maze_2d/easy`` and ``maze_2d/hard`` stay).
"""

from agent.actions import MazeActionSpace
from agent.config import EndpointConfig, RetryPolicy, RunnerConfig, SamplingParams
from agent.env import ENV_SPEC_VERSION, Feedback, MazeEnv, validate_action
from agent.errors import AgentError, PolicyError, RetryBudgetExhausted
from agent.mazes import MazeLayout, generate, generate_from_seed, shortest_path
from agent.outage import EndpointWaits
from agent.policies import CallablePolicy, OpenAIPolicy, Policy, PolicyReply, bfs_policy, solver_reply
from agent.protocol import KEYWORD, PROTOCOLS, TUPLE, HistoryPolicy, Protocol, get_protocol
from agent.records import EpisodeRecord, StopReason, TurnRecord, is_scored, read_jsonl, write_jsonl
from agent.registration import DEFAULT_ENV_ID, VARIANTS, get_variant, register_envs
from agent.render import png_data_url, render_frame
from agent.replay import replay_conversation, replay_frames, save_gif
from agent.runner import (
    EpisodeSpec,
    run_endpoint_async,
    run_episode,
    run_episode_async,
    run_episodes,
    run_episodes_async,
)

register_envs()

__all__ = [
    "EndpointWaits",
    "DEFAULT_ENV_ID",
    "ENV_SPEC_VERSION",
    "KEYWORD",
    "PROTOCOLS",
    "TUPLE",
    "VARIANTS",
    "AgentError",
    "CallablePolicy",
    "EndpointConfig",
    "EpisodeRecord",
    "EpisodeSpec",
    "Feedback",
    "HistoryPolicy",
    "MazeActionSpace",
    "MazeEnv",
    "MazeLayout",
    "OpenAIPolicy",
    "Policy",
    "PolicyError",
    "PolicyReply",
    "Protocol",
    "RetryBudgetExhausted",
    "RetryPolicy",
    "RunnerConfig",
    "SamplingParams",
    "StopReason",
    "TurnRecord",
    "bfs_policy",
    "generate",
    "generate_from_seed",
    "get_protocol",
    "get_variant",
    "is_scored",
    "png_data_url",
    "read_jsonl",
    "register_envs",
    "render_frame",
    "replay_conversation",
    "replay_frames",
    "run_endpoint_async",
    "run_episode",
    "run_episode_async",
    "run_episodes",
    "run_episodes_async",
    "save_gif",
    "shortest_path",
    "solver_reply",
    "validate_action",
    "write_jsonl",
]
