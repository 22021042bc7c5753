"""A key file's text: read from disk, parsed and validated, every failure a :class:`KeySourceError`.

The gateway's :class:`~serving.auth.keys.KeyRing` and ``maze-serve keys check``
(:mod:`serving.auth.key_check`) read a key file through these functions, so a file the check
passes is one the gateway loads, and one it refuses is refused with the same words.

Whatever the bytes, only a :class:`KeySourceError` leaves: a read that fails in any way (missing,
a directory or a device in the file's place, a file that changes while it is read, bytes that are
not UTF-8) or a parser that fails in any way is an error of the source, which the ring turns into
its grace and then a 503, never an exception that escapes to the request. The errors name entries
(``keys[2]``) and fields, never a value: a token pasted in the wrong field would otherwise reach
the logs.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from serving.config import MIN_SECRET_LENGTH, ApiKeySpec, KeyFileSpec, KeyLimitsSpec

SECRET_RUN = 8  # an error shows no run this long of a string that may be a token
READ_ATTEMPTS = 3  # reads of a file that changes while it is read, before its source counts as failing
_FIELDS = frozenset({*KeyFileSpec.model_fields, *ApiKeySpec.model_fields, *KeyLimitsSpec.model_fields})
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # a key name as ApiKeySpec accepts it


class KeySourceError(ValueError):
    """A key source that cannot be used; ``reason`` is its metric label (missing, unreadable, changed,
    encoding, empty, yaml, invalid). Its text names entries and fields, never a value: it is logged.
    ``problems`` are its parts, one per entry and field, for a reader that lists them."""

    def __init__(self, reason: str, message: str, problems: tuple[str, ...] = ()):
        super().__init__(message)
        self.reason = reason
        self.problems = problems or (message,)


# -- reading ---------------------------------------------------------------------------------------------


def read_key_file(path: str | Path) -> str:
    """The text of the key file at ``path``, read in one piece.

    Raises:
        KeySourceError: the file is missing (``missing``), not a regular file or not readable
            (``unreadable``), changed while it was read ``READ_ATTEMPTS`` times in a row
            (``changed``: a writer that rewrites it in place), or not UTF-8 (``encoding``).
    """
    for _ in range(READ_ATTEMPTS):
        data = _read_once(Path(path))
        if data is not None:
            break
    else:
        raise KeySourceError("changed", f"changed while it was read, {READ_ATTEMPTS} times in a row (write it "
                                        "to another file and rename it over this one)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        where = exc.start
    # The position only: the bytes around it may be part of a token.
    line = data.count(b"\n", 0, where) + 1
    raise KeySourceError("encoding", f"is not UTF-8 text (an undecodable byte on line {line}, byte {where})")


def _read_once(path: Path) -> bytes | None:
    """The file's bytes, or None when it changed while they were read (its size or times moved)."""
    try:
        # O_NONBLOCK: a FIFO in the file's place opens at once (and is refused below) instead of blocking.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _os_error(exc) from None
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            raise KeySourceError("unreadable", f"is a {_file_kind(before.st_mode)}, not a regular file")
        data = _read_all(fd)
        after = os.fstat(fd)
    except OSError as exc:
        raise _os_error(exc) from None
    finally:
        os.close(fd)
    same = _stamp(before) == _stamp(after) and len(data) == after.st_size
    return data if same else None


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _stamp(st: os.stat_result) -> tuple:
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"),
             (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"))
    return next((name for test, name in kinds if test(mode)), "special file")


def _os_error(exc: OSError) -> KeySourceError:
    reason = "missing" if isinstance(exc, FileNotFoundError) else "unreadable"
    return KeySourceError(reason, f"cannot be read ({exc.strerror or type(exc).__name__})")


# -- parsing and validation ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParsedKeyFile:
    """A valid key file's spec, and how its errors and notices name each entry (``labels[i]``)."""

    spec: KeyFileSpec
    labels: tuple[str, ...]


def parse_spec(text: str) -> ParsedKeyFile:
    """The validated spec of a key file's content (YAML or JSON).

    Raises:
        KeySourceError: content that is empty (``empty``), not YAML (``yaml``) or not a valid key
            file (``invalid``; also for any failure of the parser itself, by its type's name only).
            The message holds no value of the file and chains no exception that would.
    """
    try:
        doc = _document(text)
        spec = _validated(doc)
        tokens = _token_like(doc)
        return ParsedKeyFile(spec, tuple(_label(doc, i, tokens) for i in range(len(spec.keys))))
    except KeySourceError:
        raise
    except Exception as exc:  # noqa: BLE001 - any parser failure is the source's (e.g. RecursionError)
        failure = type(exc).__name__
    raise KeySourceError("invalid", f"not a valid key file: the parser failed ({failure})")


def _document(text: str):
    """The parsed YAML; a syntax error by its position only (the text around it may be a token).

    The error is raised outside the ``except`` so that YAML's own (which quotes the text) is not
    chained to it."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark, position = getattr(exc, "problem_mark", None), getattr(exc, "position", None)
    where = (f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None
             else f" at character {position}" if position is not None else "")
    raise KeySourceError("yaml", f"not valid YAML{where}")


def _token_like(doc) -> list[str]:
    """Strings of a parsed key file that may be tokens: under ``secrets`` or ``sha256``, mapping
    keys that are no field (a token pasted as one), and any string as long as a token may be."""
    out: list[str] = []

    def walk(node, under_secret: bool) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if isinstance(k, str) and k not in _FIELDS:
                    out.append(k)
                walk(v, under_secret or k in ("secrets", "sha256"))
        elif isinstance(node, list):
            for v in node:
                walk(v, under_secret)
        elif isinstance(node, str) and (under_secret or len(node) >= MIN_SECRET_LENGTH):
            out.append(node)

    walk(doc, False)
    return out


def _shares_run(text: str, tokens: list[str]) -> bool:
    return any(t[i:i + SECRET_RUN] in text for t in tokens for i in range(len(t) - SECRET_RUN + 1))


def _redact(text: str, tokens: list[str]) -> str:
    """``text`` with every run of ``SECRET_RUN`` characters of a token replaced (a last guard: the
    messages are built to hold none)."""
    for t in tokens:
        for i in range(len(t) - SECRET_RUN + 1):
            text = text.replace(t[i:i + SECRET_RUN], "***")
    return text


def _label(doc, index: int, tokens: list[str]) -> str:
    """``keys[i]``, with the entry's name when it is plainly a name and shares no run with a token."""
    entries = doc.get("keys") if isinstance(doc, dict) else None
    entry = entries[index] if isinstance(entries, list) and 0 <= index < len(entries) else None
    name = entry.get("name") if isinstance(entry, dict) else None
    shown = isinstance(name, str) and _PLAIN_NAME.fullmatch(name) and not _shares_run(name, tokens)
    return f"keys[{index}] ({name!r})" if shown else f"keys[{index}]"


def _where(loc: tuple, doc, tokens: list[str]) -> str:
    """A validation error's location: entries by index (and safe name), fields by name, any other
    mapping key (it may be a pasted token) as ``<unknown field>``."""
    out = ""
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out = _label(doc, part, tokens) if tuple(loc[:i]) == ("keys",) else f"{out}[{part}]"
        else:
            out += ("." if out else "") + (part if part in _FIELDS else "<unknown field>")
    return out or "the file"


def _validated(doc) -> KeyFileSpec:
    """The key file's spec; its errors built from pydantic's locations and messages, never its inputs."""
    if doc is None:
        raise KeySourceError("empty", "is empty (no `keys:`)")
    try:
        return KeyFileSpec.model_validate(doc)
    except ValidationError as exc:
        errors = exc.errors(include_input=False, include_url=False, include_context=False)
    tokens = _token_like(doc)
    problems = tuple(_redact(f"{_where(e['loc'], doc, tokens)}: {e['msg']}", tokens) for e in errors)
    raise KeySourceError("invalid", "not a valid key file: " + "; ".join(problems), problems)


__all__ = ["READ_ATTEMPTS", "SECRET_RUN", "KeySourceError", "ParsedKeyFile", "parse_spec", "read_key_file"]
