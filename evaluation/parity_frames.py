"""The fixed maze frames a served adapter's parity is measured on (``serving/parity/frames.json``).

The gateway's parity check (``serving.parity``) compares what the gateway serves for an adapter
version with HF + peft on the adapter's own files, for the first turn of a few fixed mazes: the
messages the agent runner sends (the turn-1 prompt and frame of the default maze variant, tuple
protocol). serving does not import the agent, so the frames are written here, where the agent's
env and prompts are at hand, and shipped as a file; a golden test keeps the file equal to
:func:`build_frames`.

    .venv/bin/python -m evaluation.parity_frames   # rewrites serving/parity/frames.json
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym

from agent import DEFAULT_ENV_ID, register_envs
from agent.env import read_env
from agent.protocol import get_protocol, user_message

FRAMES_FILE = Path(__file__).resolve().parents[1] / "serving" / "parity" / "frames.json"
SEEDS = (0, 1, 2, 3)


def build_frames(seeds: tuple[int, ...] = SEEDS, env_id: str = DEFAULT_ENV_ID, protocol: str = "tuple") -> dict[str, Any]:
    """The turn-1 chat messages of ``seeds`` (one conversation each) and what they were made from."""
    register_envs()
    proto = get_protocol(protocol)
    conversations = []
    for seed in seeds:
        env = gym.make(env_id, disable_env_checker=True).unwrapped
        frame, _ = env.reset(seed=seed)
        conversations.append([user_message(proto.initial_text(*read_env(env)), frame)])
        env.close()
    return {"env_id": env_id, "protocol": protocol, "seeds": list(seeds), "conversations": conversations}


def main() -> None:
    FRAMES_FILE.write_text(json.dumps(build_frames(), indent=1) + "\n")
    print(f"wrote {FRAMES_FILE}")


if __name__ == "__main__":
    main()
