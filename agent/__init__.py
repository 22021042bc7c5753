"""maze-gateway agent: the VisGym-compatible maze environment, prompt protocol and episode runner.

Laid out in rooms, each importing only those below it: ``maze/`` (layouts, frames, actions: pure),
``protocol/`` (what the model sees and says), ``env/`` (the gymnasium env and its registration),
``runner/`` (episodes against a policy, their records), ``tools/`` (replays, the scripted server)
and ``cli/`` (every CLI's exit-code boundary, ``maze-demo``); ``errors`` is the package's error
root. The names below are the library's public API.

Importing the package registers ``maze_2d/simple``, ``maze_2d/easy`` and ``maze_2d/hard`` with
gymnasium (those not already registered: with VisGym installed as ``gymnasium``, its own
``maze_2d/easy`` and ``maze_2d/hard`` stay).
"""

from agent.env import DEFAULT_ENV_ID, ENV_SPEC_VERSION, VARIANTS, MazeEnv, get_variant, register_envs
from agent.errors import AgentError, PolicyError, RetryBudgetExhausted
from agent.maze import (
    Feedback,
    MazeActionSpace,
    MazeLayout,
    generate,
    generate_from_seed,
    png_data_url,
    render_frame,
    shortest_path,
    validate_action,
)
from agent.protocol import KEYWORD, PROTOCOLS, TUPLE, HistoryPolicy, Protocol, get_protocol
from agent.runner import (
    CallablePolicy,
    EndpointConfig,
    EndpointWaits,
    EpisodeRecord,
    EpisodeSpec,
    OpenAIPolicy,
    Policy,
    PolicyReply,
    RetryPolicy,
    RunnerConfig,
    SamplingParams,
    StopReason,
    TurnRecord,
    bfs_policy,
    is_scored,
    read_jsonl,
    run_endpoint_async,
    run_episode,
    run_episode_async,
    run_episodes,
    run_episodes_async,
    solver_reply,
    write_jsonl,
)
from agent.tools import replay_conversation, replay_frames, save_gif

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
