"""Maze actions: VisGym's validation order, feedback, the relaxed keyword form and the action space.

An action is text holding a Python 2-tuple, ``('move', d)`` or ``('stop', 'stop')``. Validation
follows VisGym's ``maze_2d`` step by step, so a reply is accepted or rejected here exactly when it
is there, with one deliberate difference: where VisGym raises (a ``move`` payload too large for an
int64, e.g. a 20-digit number), the action is reported as out of the action space instead.
"""

from __future__ import annotations

import ast
import enum
import re
from typing import Any

import numpy as np
from gymnasium import spaces

ACTION_NAMES = ("move", "stop")
#: Keyword -> action, for ``relaxed`` envs (the keyword protocol's words).
KEYWORD_ACTIONS: dict[str, tuple[str, Any]] = {
    "right": ("move", 0),
    "up": ("move", 1),
    "left": ("move", 2),
    "down": ("move", 3),
    "stop": ("stop", "stop"),
}
_KEYWORD = re.compile(r"^\s*(?:<action>\s*)?([A-Za-z]+)\s*(?:</action>)?\s*$", re.IGNORECASE)
_STOP_CHARS = frozenset("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


class Feedback(str, enum.Enum):
    """Outcome of one step, in VisGym's validation order. The value is the text the model sees."""

    CANNOT_PARSE = "Cannot parse the action, action invalid."
    BAD_FORMAT = "Action format invalid, it must be a tuple (name, payload)."
    UNKNOWN_ACTION = "Action name not recognised."
    OUT_OF_SPACE = "Action not in the valid action space, nothing executed."
    HIT_WALL = "Cannot move into a wall, the agent did not move."
    EXECUTED = "Action executed successfully."

    @property
    def valid(self) -> bool:
        """True when the action passed validation (a wall bump is a valid action)."""
        return self in (Feedback.HIT_WALL, Feedback.EXECUTED)


def _payload_ok(name: str, payload: Any) -> bool:
    if name == "move":
        # numpy ints and bools count as ints; floats never do. Any size is compared as a Python
        # int, so a huge payload is out of range rather than an overflow (VisGym raises there).
        if isinstance(payload, (bool, np.bool_)):
            return True
        return isinstance(payload, (int, np.integer)) and 0 <= int(payload) <= 3
    return isinstance(payload, str) and 1 <= len(payload) <= 4 and all(c in _STOP_CHARS for c in payload)


def validate_action(action: Any) -> tuple[Feedback, str | None, Any]:
    """Check an action (text or tuple) the way VisGym does.

    Text is read with ``ast.literal_eval``; only a tuple of two elements is an action (a list such
    as ``"['move', 1]"`` is a format error, as in VisGym). Returns ``(feedback, name, payload)``;
    ``name`` is None unless validation passed.
    """
    if isinstance(action, (str, bytes)):
        try:
            action = ast.literal_eval(action.decode() if isinstance(action, bytes) else action)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return Feedback.CANNOT_PARSE, None, None
    if not isinstance(action, tuple) or len(action) != 2:
        return Feedback.BAD_FORMAT, None, None
    name, payload = action
    if not isinstance(name, str) or name not in ACTION_NAMES:
        return Feedback.UNKNOWN_ACTION, None, None
    if not _payload_ok(name, payload):
        return Feedback.OUT_OF_SPACE, None, None
    return Feedback.EXECUTED, name, payload


def relaxed_action(action: Any) -> Any:
    """A bare keyword (``left``, ``<action>up</action>``, any case) as its tuple; anything else as is."""
    if isinstance(action, str):
        match = _KEYWORD.match(action)
        if match and match.group(1).lower() in KEYWORD_ACTIONS:
            return KEYWORD_ACTIONS[match.group(1).lower()]
    return action


# VisGym's feedback sentences, by how each one starts or ends, for envs that report no code.
_VISGYM_FEEDBACK = (
    ("Cannot parse action", Feedback.CANNOT_PARSE),
    ("The action format is invalid", Feedback.BAD_FORMAT),
    ("is not recognized", Feedback.UNKNOWN_ACTION),
    ("is not in the valid action space", Feedback.OUT_OF_SPACE),
    ("Cannot move into a wall", Feedback.HIT_WALL),
    ("Action executed successfully", Feedback.EXECUTED),
)


def feedback_code(info: dict[str, Any]) -> str:
    """The :class:`Feedback` name of a step's ``info``: this env's ``feedback_code``, else read from
    the ``env_feedback`` text of a VisGym env (``UNKNOWN`` when the text is not one of its sentences)."""
    if info.get("feedback_code"):
        return str(info["feedback_code"])
    text = str(info.get("env_feedback") or "")
    for marker, code in _VISGYM_FEEDBACK:
        if marker in text:
            return code.name
    return "UNKNOWN"


class MazeActionSpace(spaces.Space):
    """VisGym's function-conditional action space: a name, then a payload from that name's space.

    ``get_function_names()`` lists the names (what prompts and parse-failure messages are built
    from); ``space["move"]`` is ``Discrete(4)`` and ``space["stop"]`` a 1-4 character alphanumeric
    ``Text``. Samples are action strings, as the env's ``step`` takes them.
    """

    def __init__(self, seed: int | None = None):
        self.func_arg_spaces: dict[str, spaces.Space] = {"move": spaces.Discrete(4), "stop": spaces.Text(4)}
        super().__init__(None, None, seed)

    def get_function_names(self) -> list[str]:
        return list(ACTION_NAMES)

    def __getitem__(self, name: str) -> spaces.Space:
        return self.func_arg_spaces[name]

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if int(self.np_random.integers(2)) == 0:
            return repr(("move", int(self.np_random.integers(4))))
        return repr(("stop", "stop"))

    def contains(self, x: Any) -> bool:
        return validate_action(x)[1] is not None

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"MazeActionSpace({list(ACTION_NAMES)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MazeActionSpace)
