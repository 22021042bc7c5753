"""The prompt protocols: the texts the model sees each turn and how its reply becomes an action.

Pure functions only (no I/O). Two named, versioned protocols exist:

* ``tuple`` (VisGym's): the model replies with a Python tuple, ``('move', 0)`` or ``('stop', 'stop')``.
* ``keyword``: the model replies with ``<action>right|up|left|down|stop</action>``.

The chat messages that carry these texts, and the choice of earlier turns sent again, are in
:mod:`agent.protocol.messages`.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

from agent.maze import DIRECTION_NAMES, Feedback

Action = tuple[str, Any]

_LEGEND = (
    "In the image, walls are gray, open paths are white, you are the blue circle and the goal "
    "is the red square."
)
_SUCCESS = "You succeed when you reach the red square and then stop."


@dataclass(frozen=True)
class Protocol:
    """A named, versioned prompt protocol. ``id`` (``name/vN``) is recorded with results."""

    name: str
    version: int
    actions_text: str
    reply_text: str

    @property
    def id(self) -> str:
        return f"{self.name}/v{self.version}"

    def initial_text(self, height: int, width: int, legend: str | None = None) -> str:
        """Turn-1 text: size, legend, actions, success rule, reply format (in that order).

        ``legend`` replaces the colour legend (a text drawing of the maze needs another one).
        """
        return "\n".join(
            (
                f"You are navigating a {height}x{width} maze.",
                legend or _LEGEND,
                self.actions_text,
                _SUCCESS,
                self.reply_text,
            )
        )

    def parse_failure_text(self) -> str:
        """Text of the message sent when no action could be parsed from the reply."""
        return "Your reply could not be parsed as an action. " + self.reply_text

    def parse(self, reply: str) -> Action | None:
        """The action in a reply, or None when none can be parsed."""
        return _PARSERS[self.name](reply)

    def format_action(self, action: Action) -> str:
        """The canonical reply text for an action (used for demonstrations)."""
        name, payload = action
        if self.name == "tuple":
            return repr((name, payload))
        word = "stop" if name == "stop" else DIRECTION_NAMES[int(payload)]
        return f"<action>{word}</action>"


TUPLE = Protocol(
    name="tuple",
    version=1,
    actions_text=(
        "Actions:\n"
        "- ('move', direction): move one cell, where direction is 0=right, 1=up, 2=left, 3=down.\n"
        "- ('stop', 'stop'): end the episode."
    ),
    reply_text=(
        "Reply with exactly one action as a plain Python tuple, without backticks or code "
        "blocks, for example ('move', 0) or ('stop', 'stop')."
    ),
)
KEYWORD = Protocol(
    name="keyword",
    version=1,
    actions_text=(
        "Actions:\n"
        "- <action>right</action>, <action>up</action>, <action>left</action>, "
        "<action>down</action>: move one cell in that direction.\n"
        "- <action>stop</action>: end the episode."
    ),
    reply_text="Reply with exactly one action tag, for example <action>right</action> or <action>stop</action>.",
)
PROTOCOLS: dict[str, Protocol] = {p.name: p for p in (TUPLE, KEYWORD)}


def get_protocol(name: str) -> Protocol:
    """Look up a protocol by ``name`` or ``name/vN``."""
    base, _, version = name.partition("/")
    proto = PROTOCOLS.get(base)
    if proto is None or (version and version != f"v{proto.version}"):
        raise ValueError(f"unknown protocol {name!r}; known: {sorted(p.id for p in PROTOCOLS.values())}")
    return proto


# -- parsing ---------------------------------------------------------------------------------
_BARE_NAME = re.compile(r"(?<=[(,])\s*(?!(?:True|False|None)\b)([A-Za-z_]\w*)\s*(?=[,)])")
_KEYWORD_TAG = re.compile(r"<action>\s*(right|up|left|down|stop)\s*</action>", re.IGNORECASE)


def _balanced_groups(text: str):
    """Yield each balanced ``( ... )`` substring, outermost first, in order of opening."""
    for start, ch in enumerate(text):
        if ch != "(":
            continue
        depth = 0
        for end in range(start, len(text)):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            if depth == 0:
                yield text[start : end + 1]
                break


def _eval_pair(group: str) -> Action | None:
    for candidate in (group, _BARE_NAME.sub(lambda m: repr(m.group(1)), group)):
        try:
            value = ast.literal_eval(candidate)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
            return value[0], value[1]
    return None


def parse_tuple_reply(reply: str) -> Action | None:
    """First balanced ``( ... )`` that evaluates to a 2-tuple starting with a name."""
    if len(reply) > 4096:  # replies are a handful of tokens; bound the quadratic scan
        reply = reply[:4096]
    for group in _balanced_groups(reply):
        action = _eval_pair(group)
        if action is not None:
            return action
    return None


def parse_keyword_reply(reply: str) -> Action | None:
    """Last ``<action>word</action>`` tag, as an env action tuple."""
    tags = _KEYWORD_TAG.findall(reply)
    if not tags:
        return None
    word = tags[-1].lower()
    return ("stop", "stop") if word == "stop" else ("move", DIRECTION_NAMES.index(word))


_PARSERS = {"tuple": parse_tuple_reply, "keyword": parse_keyword_reply}


def protocol_corpus(sizes: tuple[int, ...] = (7, 9, 11)) -> list[str]:
    """Every text a protocol can produce (for building a small tokenizer)."""
    texts: list[str] = []
    for proto in PROTOCOLS.values():
        texts += [proto.initial_text(s, s) for s in sizes]
        texts.append(proto.parse_failure_text())
        texts += [proto.format_action(("move", d)) for d in range(4)]
        texts.append(proto.format_action(("stop", "stop")))
    texts += [f.value for f in Feedback]
    return texts
