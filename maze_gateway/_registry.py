"""Inspect AI's entry point (``[project.entry-points.inspect_ai]``): importing it registers the
``maze_gateway/maze`` task. Inspect loads it only when a ``maze_gateway/...`` name is asked for."""

from maze_gateway.inspect_task import maze

__all__ = ["maze"]
