"""API keys: who is calling, which models they may use, and what else they may do.

A key (``config.ApiKeySpec``) names a tenant, the models it may call (fnmatch patterns over
``base`` and ``base:adapter``) and a role:

* ``inference``: call and list the models its patterns cover;
* ``publisher``: also push versions of, run canaries on, promote, abort and roll back the adapter
  names its patterns cover (``base:name`` matched for some served base);
* ``admin``: everything, on every name (its patterns still decide what it calls and lists), and
  alone may remove a name or force a version past its parity check (``force-parity``: a move that
  starts a version serving although its parity failed or was not compared).

Keys come from a key file (``auth.keys_file``, e.g. a mounted Kubernetes Secret), an env var
holding the same content (``auth.keys_env``), and the flat list of ``auth.api_keys_env`` (each an
admin over ``*`` without limits). Only their sha256 digests are kept in memory; a request's token is
hashed and looked up. The sources are read again once ``auth.reload_s`` has passed, so keys are
added, rotated (several secrets per key) and revoked (a key ``disabled``, or left with no secrets)
without a restart.

A key source that loaded and then goes missing, empty or invalid keeps its last keys for
``auth.keys_grace_s`` (a bad edit does not lock every tenant out at once), each failed read logged
and counted (``maze_gateway_key_source_errors``); after that, as at once for a source that never
loaded, a token no other source knows is answered 503 (:class:`~serving.errors.KeysUnavailable`).
The same for replicas of any age, and never for ever. A key file's errors name entries
(``keys[2]``) and fields, never a value: a token pasted in the wrong field would otherwise reach
the logs.

The caller of the request being served, whose :class:`Principal` this module makes, lives in
:mod:`serving.auth.caller`.
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import ValidationError

from serving.adapters import ModelId
from serving.config import MIN_SECRET_LENGTH, ApiKeySpec, AuthSpec, KeyFileSpec, KeyLimitsSpec
from serving.errors import Forbidden, KeysUnavailable
from serving.metrics import metric

log = logging.getLogger(__name__)

PUBLISH_ACTIONS = ("push", "canary", "abort", "promote", "rollback")  # a publisher's, on its own names
ADMIN_ACTIONS = ("remove", "force-parity")


def digest(token: str) -> str:
    """The sha256 hex digest a key is known by."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Principal:
    """A key as the gateway holds it (no secret): tenant name, role, model patterns, limits."""

    name: str
    role: str
    models: tuple[str, ...]
    limits: KeyLimitsSpec = field(default_factory=KeyLimitsSpec)

    def may_call(self, model: str) -> bool:
        """Whether ``model`` (``base``, ``base:name`` or ``base:name@version``) is in scope."""
        unversioned = str(ModelId.parse(model).unversioned)
        return any(fnmatch.fnmatchcase(unversioned, p) for p in self.models)

    def may_manage(self, action: str, name: str, bases: list[str] | tuple[str, ...]) -> bool:
        """Whether the key may ``action`` (push, canary, abort, promote, rollback; remove and
        force-parity: admins only) the adapter ``name`` published for one of ``bases``."""
        if self.role == "admin":
            return True
        if self.role != "publisher" or action not in PUBLISH_ACTIONS:
            return False
        return any(self.may_call(str(ModelId(b, name))) for b in bases)

    def check_manage(self, action: str, name: str, bases: list[str] | tuple[str, ...]) -> None:
        if not self.may_manage(action, name, bases):
            why = (f"its role is {self.role!r}" if self.role == "inference" or action not in PUBLISH_ACTIONS
                   else f"its models {list(self.models)} do not cover {name!r}")
            if action in ADMIN_ACTIONS:
                why += " (only an admin may)"
            raise Forbidden(f"key {self.name!r} may not {action} adapter {name!r}: {why}")

    @property
    def limited(self) -> bool:
        lim = self.limits
        return bool(lim.requests or lim.tokens or lim.concurrent)


def _principal(spec: ApiKeySpec) -> Principal:
    return Principal(name=spec.name, role=spec.role, models=tuple(spec.models), limits=spec.limits)


SECRET_RUN = 8  # an error shows no run this long of a string that may be a token
_FIELDS = frozenset({*KeyFileSpec.model_fields, *ApiKeySpec.model_fields, *KeyLimitsSpec.model_fields})
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # a key name as ApiKeySpec accepts it


class KeySourceError(ValueError):
    """A key source that cannot be used; ``reason`` is its metric label (missing, unreadable, empty,
    yaml, invalid). Its text names entries and fields, never a value: it is logged."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


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
    text = "; ".join(f"{_where(e['loc'], doc, tokens)}: {e['msg']}" for e in errors)
    raise KeySourceError("invalid", "not a valid key file: " + _redact(text, tokens))


def parse_key_file(text: str) -> dict[str, Principal]:
    """Digest -> principal for a key file's content (YAML or JSON); disabled keys and keys without
    secrets are left out (refused).

    Raises:
        KeySourceError: (a ValueError) content that is empty, not YAML or not a valid key file, or
            one secret given to two keys; its message holds no value of the file.
    """
    doc = _document(text)
    spec = _validated(doc)
    out: dict[str, Principal] = {}
    owner: dict[str, int] = {}
    for i, key in enumerate(spec.keys):
        if key.disabled:
            continue
        principal = _principal(key)
        for d in [*map(digest, key.secrets), *key.sha256]:
            if d in out and out[d].name != key.name:
                tokens = _token_like(doc)
                raise KeySourceError("invalid", f"{_label(doc, owner[d], tokens)} and {_label(doc, i, tokens)} "
                                                "share a secret")
            out[d], owner[d] = principal, i
    return out


def flat_keys(value: str) -> dict[str, Principal]:
    """The ``api_keys_env`` form: comma-separated tokens, each an admin over every model."""
    out = {}
    for token in (t.strip() for t in value.split(",")):
        if token:
            d = digest(token)
            out[d] = Principal(name=f"key-{d[:8]}", role="admin", models=("*",))
    return out


@dataclass
class _Source:
    """What one key source (``auth.keys_file`` or ``auth.keys_env``) last gave, and since when it fails."""

    where: str
    keys: dict[str, Principal] = field(default_factory=dict)
    loaded: bool = False
    failing_since: float | None = None

    def usable(self, now: float, grace_s: float) -> bool:
        """Whether its keys answer: its last read worked, or it loaded once and fails within the grace."""
        return self.failing_since is None or (self.loaded and now - self.failing_since < grace_s)


def _os_reason(exc: OSError) -> str:
    return "missing" if isinstance(exc, FileNotFoundError) else "unreadable"


class KeyRing:
    """The keys of an :class:`AuthSpec`, by digest, re-read from their sources every ``reload_s``."""

    def __init__(self, spec: AuthSpec, clock=time.monotonic):
        self.spec, self._clock = spec, clock
        self._keys: dict[str, Principal] = {}
        self._sources: dict[str, _Source] = {}
        self._refused: list[str] = []  # sources whose keys are refused (failing, no grace left)
        self._next_load = float("-inf")

    def lookup(self, token: str | None) -> Principal | None:
        """The principal of a bearer ``token``, or None for a missing or unknown one.

        Raises:
            KeysUnavailable: a token no source knows while a key source is refused: it may be one of
                that source's keys, and the fault is the gateway's, not the caller's (503, which
                clients retry and monitoring pages on, rather than a 401 that tells every tenant
                its key is wrong). The message names no source: any caller reads it.
        """
        if self._clock() >= self._next_load:
            self.reload()
        if not token:
            return None
        principal = self._keys.get(digest(token))
        if principal is None and self._refused:
            raise KeysUnavailable("the gateway cannot read its API keys; requests are refused until its operators "
                                  "restore them")
        return principal

    def reload(self) -> None:
        """Read every source again: the flat keys, then each key file (its last keys within its grace)."""
        now = self._clock()
        self._next_load = now + self.spec.reload_s
        keys = flat_keys(os.environ.get(self.spec.api_keys_env, "")) if self.spec.api_keys_env else {}
        refused = []
        for where, read in self._readers():
            source = self._sources.setdefault(where, _Source(where))
            self._refresh(source, read, keys, now)
            if not source.usable(now, self.spec.keys_grace_s):
                refused.append(where)
                continue
            keys.update(source.keys)
            if source.failing_since is not None:  # read again when its grace ends, not up to reload_s later
                self._next_load = min(self._next_load, source.failing_since + self.spec.keys_grace_s)
        self._keys, self._refused = keys, refused

    def _refresh(self, source: _Source, read: Callable[[], str], keys: dict[str, Principal], now: float) -> None:
        """One read of ``source``; ``keys`` are those of the sources read before it (a secret may not
        name two keys across sources)."""
        try:
            found = parse_key_file(read())
            clash = sorted({keys[d].name for d in found if d in keys and keys[d].name != found[d].name})
            if clash:
                raise KeySourceError("invalid", f"a secret is also the secret of {len(clash)} key(s) of an "
                                                "earlier source")
        except OSError as exc:
            return self._failed(source, _os_reason(exc), f"cannot be read ({exc.strerror or type(exc).__name__})",
                                now)
        except KeySourceError as exc:
            return self._failed(source, exc.reason, str(exc), now)
        if source.failing_since is not None:
            log.warning("API keys: %s reads again (%d secrets)", source.where, len(found))
        source.keys, source.loaded, source.failing_since = found, True, None

    def _failed(self, source: _Source, reason: str, message: str, now: float) -> None:
        """Log and count a failed read; the source's keys stay within the grace, then are refused."""
        metric("key_source_errors").inc(tags={"reason": reason})
        if source.failing_since is None:
            source.failing_since = now
        left = self.spec.keys_grace_s - (now - source.failing_since)
        if not source.loaded:
            then = "it never loaded: requests are refused (503) until it does"
        elif left > 0:
            then = (f"its last {len(source.keys)} secrets are kept {left:.0f}s more (auth.keys_grace_s), "
                    "then refused (503)")
        else:
            then = (f"failing for {now - source.failing_since:.0f}s, past auth.keys_grace_s: its secrets are "
                    "refused (503) until it reads again")
        log.error("API keys: %s: %s; %s", source.where, message, then)

    def _readers(self) -> list[tuple[str, Callable[[], str]]]:
        """The key file sources of the spec: where each is (for logs) and how to read it."""
        spec, out = self.spec, []
        if spec.keys_file:
            out.append((f"auth.keys_file {spec.keys_file}", Path(spec.keys_file).read_text))
        if spec.keys_env:
            out.append((f"auth.keys_env ${spec.keys_env}", lambda: _env_text(spec.keys_env)))
        return out


def _env_text(name: str) -> str:
    text = os.environ.get(name)
    if text is None:
        raise KeySourceError("missing", "is not set")
    return text


__all__ = ["ADMIN_ACTIONS", "PUBLISH_ACTIONS", "KeyRing", "KeySourceError", "Principal", "digest", "flat_keys",
           "parse_key_file"]
