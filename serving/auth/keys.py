"""API keys: who is calling, which models they may use, and what else they may do.

A key (``config.ApiKeySpec``) names a tenant, the models it may call (fnmatch patterns over
``base`` and ``base:adapter``) and a role:

* ``inference``: call and list the models its patterns cover;
* ``publisher``: also push versions of, run canaries on, promote, abort and roll back the adapter
  names its patterns cover (``base:name`` matched for some served base);
* ``admin``: everything, on every name (its patterns still decide what it calls and lists).

Keys come from a key file (``auth.keys_file``, e.g. a mounted Kubernetes Secret), an env var
holding the same content (``auth.keys_env``), and the flat list of ``auth.api_keys_env`` (each an
admin over ``*`` without limits). Only their sha256 digests are kept in memory; a request's token is
hashed and looked up. The sources are read again once ``auth.reload_s`` has passed, so keys are
added, rotated and revoked without a restart. A source that no longer parses keeps the keys last
loaded (a bad edit does not lock every tenant out) and is logged.

The caller of the request being served, whose :class:`Principal` this module makes, lives in
:mod:`serving.auth.caller`.
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import ValidationError

from serving.config import ApiKeySpec, AuthSpec, KeyFileSpec, KeyLimitsSpec
from serving.errors import Forbidden

log = logging.getLogger(__name__)

PUBLISH_ACTIONS = ("push", "canary", "abort", "promote", "rollback")  # a publisher's, on its own names
ADMIN_ACTIONS = ("remove",)


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
        unversioned = model.partition("@")[0]
        return any(fnmatch.fnmatchcase(unversioned, p) for p in self.models)

    def may_manage(self, action: str, name: str, bases: list[str] | tuple[str, ...]) -> bool:
        """Whether the key may ``action`` (push, canary, abort, promote, rollback, remove) the
        adapter ``name`` published for one of ``bases``."""
        if self.role == "admin":
            return True
        if self.role != "publisher" or action not in PUBLISH_ACTIONS:
            return False
        return any(self.may_call(f"{b}:{name}") for b in bases)

    def check_manage(self, action: str, name: str, bases: list[str] | tuple[str, ...]) -> None:
        if not self.may_manage(action, name, bases):
            why = (f"its role is {self.role!r}" if self.role == "inference" or action not in PUBLISH_ACTIONS
                   else f"its models {list(self.models)} do not cover {name!r}")
            raise Forbidden(f"key {self.name!r} may not {action} adapter {name!r}: {why}")

    @property
    def limited(self) -> bool:
        lim = self.limits
        return bool(lim.requests or lim.tokens or lim.concurrent)


def _principal(spec: ApiKeySpec) -> Principal:
    return Principal(name=spec.name, role=spec.role, models=tuple(spec.models), limits=spec.limits)


def parse_key_file(text: str) -> dict[str, Principal]:
    """Digest -> principal for a key file's content (YAML or JSON).

    Raises:
        ValueError: content that is not a valid key file, or one secret given to two keys.
    """
    try:
        spec = KeyFileSpec.model_validate(yaml.safe_load(text) or {})
    except (yaml.YAMLError, ValidationError) as exc:
        raise ValueError(f"invalid key file: {exc}") from None
    out: dict[str, Principal] = {}
    for key in spec.keys:
        principal = _principal(key)
        for d in [*map(digest, key.secrets), *key.sha256]:
            if d in out and out[d].name != key.name:
                raise ValueError(f"keys {out[d].name!r} and {key.name!r} share a secret")
            out[d] = principal
    return out


def flat_keys(value: str) -> dict[str, Principal]:
    """The ``api_keys_env`` form: comma-separated tokens, each an admin over every model."""
    out = {}
    for token in (t.strip() for t in value.split(",")):
        if token:
            d = digest(token)
            out[d] = Principal(name=f"key-{d[:8]}", role="admin", models=("*",))
    return out


class KeyRing:
    """The keys of an :class:`AuthSpec`, by digest, re-read from their sources every ``reload_s``."""

    def __init__(self, spec: AuthSpec, clock=time.monotonic):
        self.spec, self._clock = spec, clock
        self._keys: dict[str, Principal] = {}
        self._next_load = float("-inf")

    def lookup(self, token: str | None) -> Principal | None:
        """The principal of a bearer ``token``, or None for a missing or unknown one."""
        if self._clock() >= self._next_load:
            self.reload()
        return self._keys.get(digest(token)) if token else None

    def reload(self) -> None:
        self._next_load = self._clock() + self.spec.reload_s
        try:
            keys = self._read()
        except (OSError, ValueError) as exc:
            # Keep serving the keys last loaded: a bad edit must not lock every tenant out.
            log.error("API keys not reloaded (%s keys kept): %s", len(self._keys), exc)
            return
        self._keys = keys

    def _read(self) -> dict[str, Principal]:
        spec, keys = self.spec, {}
        if spec.api_keys_env:
            keys.update(flat_keys(os.environ.get(spec.api_keys_env, "")))
        for text, where in self._key_files():
            try:
                found = parse_key_file(text)
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
            clash = sorted({keys[d].name for d in found if d in keys and keys[d].name != found[d].name})
            if clash:
                raise ValueError(f"{where}: a secret is also the secret of {clash}")
            keys.update(found)
        return keys

    def _key_files(self) -> list[tuple[str, str]]:
        spec, out = self.spec, []
        if spec.keys_file:
            out.append((Path(spec.keys_file).read_text(), spec.keys_file))
        if spec.keys_env:
            text = os.environ.get(spec.keys_env)
            if text is None:
                raise ValueError(f"env var {spec.keys_env} (auth.keys_env) is not set")
            out.append((text, f"${spec.keys_env}"))
        return out


__all__ = ["ADMIN_ACTIONS", "PUBLISH_ACTIONS", "KeyRing", "Principal", "digest", "flat_keys", "parse_key_file"]
