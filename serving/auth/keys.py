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

A key source that loaded and then fails to read in any way (missing, not a regular file, not
UTF-8, changing while it is read, empty, not YAML, invalid, or any failure of the parser) keeps
its last keys for ``auth.keys_grace_s`` (a bad edit does not lock every tenant out at once), each
failed read logged and counted (``maze_gateway_key_source_errors``); after that, as at once for a
source that never loaded, a token no other source knows is answered 503
(:class:`~serving.errors.KeysUnavailable`). The same for replicas of any age, and never for ever:
no failure of a source escapes a request as an exception. Reading and validating a key file, and
its errors that name entries and fields but never a value, are :mod:`serving.auth.key_file`'s.

A key's token is at least its ``min_secret_length`` long (the gateway's floor when undeclared):
clear secrets are checked when loaded, and every request's token when it matches, since a
digest does not show how long its token is.

The caller of the request being served, whose :class:`Principal` this module makes, lives in
:mod:`serving.auth.caller`.
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from serving.adapters import ModelId
from serving.auth.key_file import KeySourceError, parse_spec, read_key_file
from serving.config import MIN_SECRET_LENGTH, ApiKeySpec, AuthSpec, KeyLimitsSpec
from serving.errors import Forbidden, KeysUnavailable
from serving.metrics import metric

log = logging.getLogger(__name__)

PUBLISH_ACTIONS = ("push", "canary", "abort", "promote", "rollback")  # a publisher's, on its own names
ADMIN_ACTIONS = ("remove", "force-parity")


def digest(token: str) -> str:
    """The sha256 hex digest a key is known by.

    ``surrogatepass``: a string no request can send (a lone surrogate, from a YAML escape or an
    environment variable's undecodable byte) still hashes, to a digest no token matches, instead of
    raising."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Principal:
    """A key as the gateway holds it (no secret): tenant name, role, model patterns, limits, and the
    shortest token it accepts (a digest does not show its token's length; the request's token does)."""

    name: str
    role: str
    models: tuple[str, ...]
    limits: KeyLimitsSpec = field(default_factory=KeyLimitsSpec)
    min_token_length: int = 0

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
    return Principal(name=spec.name, role=spec.role, models=tuple(spec.models), limits=spec.limits,
                     min_token_length=spec.secret_floor)


@dataclass(frozen=True)
class KeyFile:
    """A key file's keys by digest (disabled keys and keys without secrets left out: refused), and its
    notices: what loads but should be changed (an entry whose digests' token length is undeclared)."""

    keys: dict[str, Principal]
    notices: tuple[str, ...] = ()
    entries: int = 0  # the file's entries, disabled and secretless ones included


def load_key_file(text: str) -> KeyFile:
    """The keys of a key file's content (YAML or JSON), as the gateway loads them.

    Raises:
        KeySourceError: (a ValueError) content that is empty, not YAML or not a valid key file, or
            one secret given to two keys; its message holds no value of the file.
    """
    parsed = parse_spec(text)
    out: dict[str, Principal] = {}
    owner: dict[str, int] = {}
    notices = []
    for i, key in enumerate(parsed.spec.keys):
        if key.undeclared_digests:
            notices.append(f"{parsed.labels[i]}: `sha256` without `min_secret_length`: tokens shorter than "
                           f"{MIN_SECRET_LENGTH} characters are refused; add `min_secret_length: N` to this entry, N "
                           f"the length of the shortest token behind its digests (at least {MIN_SECRET_LENGTH})")
        if key.disabled:
            continue
        principal = _principal(key)
        for d in [*map(digest, key.secrets), *key.sha256]:
            if d in out and out[d].name != key.name:
                raise KeySourceError("invalid", f"{parsed.labels[owner[d]]} and {parsed.labels[i]} share a secret")
            out[d], owner[d] = principal, i
    return KeyFile(out, tuple(notices), len(parsed.spec.keys))


def parse_key_file(text: str) -> dict[str, Principal]:
    """Digest -> principal for a key file's content (:func:`load_key_file`'s keys).

    Raises:
        KeySourceError: as :func:`load_key_file`.
    """
    return load_key_file(text).keys


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
    notices: tuple[str, ...] = ()
    loaded: bool = False
    failing_since: float | None = None

    def usable(self, now: float, grace_s: float) -> bool:
        """Whether its keys answer: its last read worked, or it loaded once and fails within the grace."""
        return self.failing_since is None or (self.loaded and now - self.failing_since < grace_s)


class KeyRing:
    """The keys of an :class:`AuthSpec`, by digest, re-read from their sources every ``reload_s``."""

    def __init__(self, spec: AuthSpec, clock=time.monotonic):
        self.spec, self._clock = spec, clock
        self._keys: dict[str, Principal] = {}
        self._sources: dict[str, _Source] = {}
        self._refused: list[str] = []  # sources whose keys are refused (failing, no grace left)
        self._next_load = float("-inf")
        self._short_logged: set[str] = set()  # keys whose too-short token has been logged

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
        if principal is not None and len(token) < principal.min_token_length:
            return self._too_short(principal)
        return principal

    def _too_short(self, principal: Principal) -> None:
        """A token that matches a key's digest but is shorter than the key's floor: refused as unknown
        (401; the key's declared or default ``min_secret_length`` is what the gateway accepts, whatever
        a digest hides), logged once per key so the operator knows which key to re-issue."""
        if principal.name not in self._short_logged:
            self._short_logged.add(principal.name)
            log.error("API keys: a token of key %r is shorter than the key's %d-character floor "
                      "(min_secret_length): refused (401); issue the key a longer token", principal.name,
                      principal.min_token_length)
        return None

    def reload(self) -> None:
        """Read every source again: the flat keys, then each key file (its last keys within its grace)."""
        now = self._clock()
        next_load = now + self.spec.reload_s
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
                next_load = min(next_load, source.failing_since + self.spec.keys_grace_s)
        # Committed together, once every source has been read (a failed read started its grace above).
        self._keys, self._refused, self._next_load = keys, refused, next_load

    def _refresh(self, source: _Source, read: Callable[[], str], keys: dict[str, Principal], now: float) -> None:
        """One read of ``source``; ``keys`` are those of the sources read before it (a secret may not
        name two keys across sources). Any failure is the source's: it fails closed (grace, then
        503), never an exception out of the request that read it."""
        try:
            loaded = load_key_file(read())
            found = loaded.keys
            clash = sorted({keys[d].name for d in found if d in keys and keys[d].name != found[d].name})
            if clash:
                raise KeySourceError("invalid", f"a secret is also the secret of {len(clash)} key(s) of an "
                                                "earlier source")
        except KeySourceError as exc:
            return self._failed(source, exc.reason, str(exc), now)
        except Exception as exc:  # noqa: BLE001 - a last guard; its text is not logged (it may hold a value)
            return self._failed(source, "error", f"cannot be used ({type(exc).__name__})", now)
        if source.failing_since is not None:
            log.warning("API keys: %s reads again (%d secrets)", source.where, len(found))
        if loaded.notices != source.notices:  # logged when they change, not at every reload
            for notice in loaded.notices:
                log.warning("API keys: %s: %s", source.where, notice)
        source.keys, source.notices, source.loaded, source.failing_since = found, loaded.notices, True, None

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
            out.append((f"auth.keys_file {spec.keys_file}", lambda: read_key_file(spec.keys_file)))
        if spec.keys_env:
            out.append((f"auth.keys_env ${spec.keys_env}", lambda: _env_text(spec.keys_env)))
        return out


def _env_text(name: str) -> str:
    text = os.environ.get(name)
    if text is None:
        raise KeySourceError("missing", "is not set")
    return text


__all__ = ["ADMIN_ACTIONS", "PUBLISH_ACTIONS", "KeyFile", "KeyRing", "KeySourceError", "Principal", "digest",
           "flat_keys", "load_key_file", "parse_key_file"]
