"""SkyRL's two VisGym recipes (``examples/train/visgym``), as pure functions of reply text.

* ``sft`` (``env_sft.py``): tuple actions found by a balanced-bracket scan (quoted action name
  first, then a bare one); the final reward is ``0.8 x task + 0.2 x format rate``, where the
  format rate is the fraction of turns whose reply has non-empty ``<observation>``,
  ``<justification>`` and ``<action>`` tags (whether or not the action parsed).
* ``instruct`` (``env_instruct.py``): the last ``<action>word</action>`` tag, which must be one
  of left/right/up/down/stop; the final reward is the task reward alone.

:class:`training.skyrl.env.MazeTextEnv` plays them on any VisGym-API maze env. The functions
here decide what a reply means and what it earns; the texts are this project's wording of the
same instructions.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence

from agent.maze import KEYWORD_ACTIONS

TASK_REWARD_COEFF = 0.8
FORMAT_REWARD_COEFF = 0.2

SFT_FORMAT_INSTRUCTION = (
    "\n\nIMPORTANT: reply with exactly one action written as a Python tuple, such as ('move', 0) or "
    "('stop', 'stop'), with no backticks, code block or other formatting around it."
)
INSTRUCT_FORMAT_INSTRUCTION = (
    "\n\nIMPORTANT: end your reply with the action you choose, written as <action>ACTION</action>, "
    "where ACTION is one of: left, right, up, down, stop."
)
#: Sent with the frame when a step leaves no ``env_feedback``.
NO_FEEDBACK_TEXT = "Action executed. This is the current state:"
#: ``env_feedback`` of a turn whose reply did not parse (SkyRL's step metadata).
PARSE_FAILURE_FEEDBACK = "parse_failure"

_QUOTED_START = re.compile(r"""\(\s*['"](\w+)['"]\s*,""")
_BARE_START = re.compile(r"\(\s*(\w+)\s*,")
_ACTION_TAG = re.compile(r"<action>\s*(\w+)\s*</action>", re.IGNORECASE)
_FORMAT_TAGS = tuple(re.compile(rf"<{t}>(.*?)</{t}>", re.DOTALL) for t in ("observation", "justification", "action"))
#: The keyword protocol's words as the action tuple strings SkyRL's recipe parses.
KEYWORDS: dict[str, str] = {word: repr(action) for word, action in KEYWORD_ACTIONS.items()}


def _balanced(text: str, start: int) -> str | None:
    """``text[start:end]`` up to the bracket closing the ``(`` at ``start`` (string literals and
    square brackets respected), or None when the text ends first."""
    depth, quote, i = 0, None, start
    while i < len(text):
        ch = text[i]
        if quote is not None:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
        i += 1
    return None


def _is_pair(candidate: str) -> bool:
    try:
        value = ast.literal_eval(candidate)
    except Exception:  # noqa: BLE001 - any literal_eval failure (syntax, recursion, memory) just means "no"
        return False
    return isinstance(value, tuple) and len(value) == 2


def extract_tuple_action(reply: str) -> str | None:
    """The action string the sft recipe steps the env with, or None when the reply has none.

    The first ``('name', ...)`` group that evaluates to a 2-tuple wins; failing that, the first
    ``(name, ...)`` group with the name quoted. The text is passed on as found (the env validates
    it), so ``('jump', 3)`` is an action here and an unknown one for the env.
    """
    for match in _QUOTED_START.finditer(reply):
        candidate = _balanced(reply, match.start())
        if candidate is not None and _is_pair(candidate):
            return candidate
    for match in _BARE_START.finditer(reply):
        candidate = _balanced(reply, match.start())
        if candidate is None:
            continue
        quoted = candidate.replace(match.group(1), f"'{match.group(1)}'", 1)
        if _is_pair(quoted):
            return quoted
    return None


def extract_keyword_action(reply: str) -> str | None:
    """The instruct recipe's action: the last ``<action>word</action>`` tag as a tuple string;
    None when there is no tag or the last one is not a known word."""
    tags = _ACTION_TAG.findall(reply)
    if not tags:
        return None
    return KEYWORDS.get(tags[-1].lower())


def has_tag_format(reply: str) -> bool:
    """True when the reply has non-empty ``<observation>``, ``<justification>`` and ``<action>``."""
    for tag in _FORMAT_TAGS:
        match = tag.search(reply)
        if match is None or not match.group(1).strip():
            return False
    return True


def sft_reward(task_reward: float, format_successes: int, turns: int) -> float:
    """The sft recipe's final reward: ``0.8 x task + 0.2 x format_successes / turns``."""
    return TASK_REWARD_COEFF * task_reward + FORMAT_REWARD_COEFF * format_successes / turns


def sft_parse_failure_text(function_names: Sequence[str]) -> str:
    """What the sft recipe sends after a reply with no action tuple: the env's action names (from
    ``action_space.get_function_names()``) and an example."""
    names = ", ".join(f"'{n}'" for n in function_names)
    return (
        "Could not parse an action: no valid action tuple was found in your reply."
        "\nReply with exactly one action written as a Python tuple."
        f"\nActions you can take: {names}"
        f"\nFor example: ('{function_names[0]}', 0) or ('stop', 'stop')"
    )


INSTRUCT_PARSE_FAILURE_TEXT = (
    "Could not parse an action: no valid action was found in your reply.\n"
    "End your reply with <action>ACTION</action>, where ACTION is one of: " + ", ".join(sorted(KEYWORDS))
)
