"""Tools around the runner: replays of recorded episodes and a scripted server to play against.

:mod:`~agent.tools.replay` turns a record back into frames (GIFs, reports) or into the
conversation the model had; :mod:`~agent.tools.scripted_server` is an OpenAI-compatible server
that plays with BFS, with per-request faults chosen in the model id, for tests, the demo and
benchmarks without a model (``python -m agent.tools.scripted_server``; not imported here, so
running it imports it once).
"""

from agent.tools.replay import replay_conversation, replay_frames, save_gif

__all__ = ["replay_conversation", "replay_frames", "save_gif"]
