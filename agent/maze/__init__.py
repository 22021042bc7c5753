"""The maze itself, pure and seeded: layouts and their solving, frames, actions and feedback.

:mod:`~agent.maze.layouts` generates mazes draw for draw as VisGym's ``maze_2d`` does and solves
them (BFS); :mod:`~agent.maze.render` draws frames pixel-identical to VisGym's pygame drawing and
encodes them as PNG data URLs; :mod:`~agent.maze.actions` validates actions in VisGym's order and
names the feedback. Everything above (protocol, env, runner) builds on these; they import nothing
else of the package.
"""

from agent.maze.actions import (
    ACTION_NAMES,
    KEYWORD_ACTIONS,
    Feedback,
    MazeActionSpace,
    feedback_code,
    relaxed_action,
    validate_action,
)
from agent.maze.layouts import (
    DIRECTION_NAMES,
    MOVES,
    MazeLayout,
    Pos,
    check_size,
    corners,
    detour_moves,
    generate,
    generate_from_seed,
    grid_from_rows,
    grid_to_rows,
    shortest_path,
)
from agent.maze.render import (
    AGENT_RGB,
    CELL_PX,
    GOAL_RGB,
    WALL_RGB,
    decode_data_url,
    encode_png,
    png_data_url,
    render_frame,
)

__all__ = [
    "ACTION_NAMES",
    "AGENT_RGB",
    "CELL_PX",
    "DIRECTION_NAMES",
    "GOAL_RGB",
    "KEYWORD_ACTIONS",
    "MOVES",
    "WALL_RGB",
    "Feedback",
    "MazeActionSpace",
    "MazeLayout",
    "Pos",
    "check_size",
    "corners",
    "decode_data_url",
    "detour_moves",
    "encode_png",
    "feedback_code",
    "generate",
    "generate_from_seed",
    "grid_from_rows",
    "grid_to_rows",
    "png_data_url",
    "relaxed_action",
    "render_frame",
    "shortest_path",
    "validate_action",
]
