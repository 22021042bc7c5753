"""The gateway's access settings: API keys (inline or from a key file), the roles and limits each key
carries, and the store the limits are counted in (``ServingConfig.auth`` and ``.limits``)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from serving.config.base import NAME, SectionModel

Role = Literal["inference", "publisher", "admin"]
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
MIN_SECRET_LENGTH = 16  # the shortest bearer token a key may have (clear, or declared behind a digest)


class KeyLimitsSpec(SectionModel):
    """What one key may use; each limit is off when unset (``episodes`` has a bound of its own). Counted
    over a sliding window of ``auth.limit_window_s`` (a minute by default, as OpenAI's RPM and TPM),
    across every ingress replica when ``auth.store`` is shared."""

    requests: int | None = Field(None, ge=1, description="requests per window (RPM with the default window)")
    tokens: int | None = Field(
        None, ge=1, description="prompt + completion tokens per window (TPM with the default window); a request is "
                                "admitted while the window's tokens are below the limit and charged when its usage is known")
    concurrent: int | None = Field(
        None, ge=1, description="requests in flight at once; a server-side episode (POST /v1/episodes) holds one of "
                                "these slots for its whole life, and its own model calls run in it")
    episodes: int | None = Field(
        None, ge=1, description="server-side episodes (POST /v1/episodes) in play at once. None: `concurrent` bounds "
                                "them (each holds a slot), or 8 for a key with only request or token limits; a key "
                                "with no limits at all has none")
    window_s: float | None = Field(
        None, gt=0, le=3600, description="this key's window in seconds (None: auth.limit_window_s); a short window "
                                         "spreads the same rate evenly, so a refused client waits less")


class ApiKeySpec(SectionModel):
    """One API key: a tenant, the models it may call and what else it may do."""

    name: str = Field(description="the tenant: names the key in usage, metrics and limits (unique per key file)")
    role: Role = Field(
        "inference",
        description="'inference': call and list the models in `models`; 'publisher': also push versions and run "
                    "canaries of adapter names `models` covers, and promote, abort or roll them back; 'admin': "
                    "everything, on every name (`models` still scopes what it calls)")
    models: list[str] = Field(
        min_length=1,
        description="fnmatch patterns over '<base>' and '<base>:<adapter>' (a version suffix is ignored), e.g. "
                    "['maze-tiny', 'maze-tiny:team-a-*']; '*' is every model")
    secrets: list[str] = Field(
        default_factory=list, description="the key's bearer tokens in clear (held only as sha256 once loaded); "
                                          "several allow rotation")
    sha256: list[str] = Field(
        default_factory=list, description="hex sha256 digests of the key's bearer tokens (declare their tokens' "
                                          "length in `min_secret_length`)")
    min_secret_length: int | None = Field(
        None, description="the length of the shortest token behind this key's secrets, at least "
                          f"{MIN_SECRET_LENGTH}: a digest does not show how long, so how guessable, its token is. A "
                          "request whose token is shorter is refused (401) even when its digest matches, and clear "
                          f"`secrets` must be this long too. None: {MIN_SECRET_LENGTH}, the gateway's floor (a "
                          "`sha256` entry without it loads, with a notice from the gateway and `maze-serve keys "
                          "check` asking to declare it)")
    disabled: bool = Field(False, description="refuse this key (its secrets may stay in the file); the rest of the "
                                              "file is unaffected")
    limits: KeyLimitsSpec = Field(default_factory=KeyLimitsSpec, description="rate and concurrency limits")

    # The messages below name no value: a key file's errors are logged, and a value in the wrong
    # field may be a token (serving.auth.keys builds its errors from these messages and locations).
    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME.match(v):
            raise ValueError("a key name must be 1-128 of letters, digits, '.', '_' or '-'")
        return v

    @field_validator("sha256")
    @classmethod
    def _digests(cls, v: list[str]) -> list[str]:
        bad = [d for d in v if not _SHA256.match(d)]
        if bad:
            raise ValueError(f"sha256 entries must be 64 lowercase hex digits (the token's digest, not the token), "
                             f"got {len(bad)} that are not")
        return v

    @model_validator(mode="after")
    def _secret_lengths(self) -> ApiKeySpec:
        """A key with no secrets (or disabled) is valid and refused; every secret meets the key's floor.

        ``sha256`` without ``min_secret_length`` is accepted (key files of releases that had no such
        field keep loading) because the floor is also applied to each request's token: a short
        token behind a digest is refused however the entry was written."""
        if self.min_secret_length is not None and self.min_secret_length < MIN_SECRET_LENGTH:
            raise ValueError(f"min_secret_length must be at least {MIN_SECRET_LENGTH}: a shorter token can be guessed")
        if any(len(s) < self.secret_floor for s in self.secrets):
            raise ValueError(f"secrets must be at least {self.secret_floor} characters")
        return self

    @property
    def secret_floor(self) -> int:
        """The shortest token this key accepts: ``min_secret_length``, else the gateway's floor."""
        return max(MIN_SECRET_LENGTH, self.min_secret_length or 0)

    @property
    def undeclared_digests(self) -> bool:
        """``sha256`` digests whose tokens' length is not declared (the gateway's floor applies)."""
        return bool(self.sha256) and self.min_secret_length is None


class KeyFileSpec(SectionModel):
    """The content of a key file (``auth.keys_file``) or variable (``auth.keys_env``): YAML or JSON."""

    keys: list[ApiKeySpec] = Field(description="the keys")

    @model_validator(mode="after")
    def _unique(self) -> KeyFileSpec:
        names = [k.name for k in self.keys]
        twins = [i for i, n in enumerate(names) if names.count(n) > 1]  # indices: a name may hold a pasted token
        if twins:
            raise ValueError(f"key names must be unique: entries {twins} share names")
        return self


class RateStoreSpec(SectionModel):
    """Where limit counters and usage live."""

    kind: Literal["memory", "redis"] = Field(
        "memory", description="'memory': in the ingress replica's process (one replica: the embedded stack); "
                              "'redis': a Redis server every ingress replica shares, so limits hold across them")
    url_env: str = Field("MAZE_REDIS_URL", description="env var holding the Redis URL (redis://[:password@]host:port/db)")
    on_error: Literal["open", "closed"] = Field(
        "open", description="when the store cannot be reached: 'open' admits requests under this replica's own "
                            "in-process counters (limits then hold per replica), 'closed' answers 503")
    timeout_s: float = Field(
        1.0, gt=0, description="timeout of one store call (a Redis call takes well under a millisecond; the margin "
                               "is for a replica whose event loop is busy)")
    retry_after_error_s: float = Field(
        5.0, ge=0, description="after a failed store call, seconds the replica goes straight to `on_error` before "
                               "trying the store again (an outage does not cost every request a timeout)")
    prefix: str = Field("maze:", description="prefix of every key the gateway writes in the store")


class AuthSpec(SectionModel):
    """API keys: who may call which models, do what, and how much. Off when no source is set."""

    api_keys_env: str | None = Field(
        None, description="env var holding comma-separated API keys, each an admin over every model with no limits "
                          "(the flat form; named 'key-<sha256 prefix>')")
    keys_file: str | None = Field(
        None, description="path of a key file (KeyFileSpec as YAML or JSON), e.g. a mounted Kubernetes Secret")
    keys_env: str | None = Field(None, description="env var holding a key file's content")
    reload_s: float = Field(
        30.0, ge=0, description="seconds a loaded key set is used before the sources are read again: keys are "
                                "added, changed or revoked without a restart within this time")
    keys_grace_s: float = Field(
        300.0, ge=0, description="when a key source that loaded before goes missing, empty or invalid, seconds its "
                                 "last keys are still used (from the first failed read; each failed read is logged "
                                 "and counted); then, as at once for a source that never loaded, requests are "
                                 "refused with 503 until it reads again")
    limit_window_s: float = Field(60.0, gt=0, le=3600, description="the sliding window of the key limits, in seconds")
    concurrency_lease_s: float = Field(
        900.0, gt=0, description="a request in flight counts against `concurrent` at most this long (bounds what a "
                                 "replica that died mid-request leaves counted in a shared store)")
    usage_retention_s: float = Field(
        86400.0, gt=0, description="seconds of per-minute usage kept for `GET /v1/usage` (Prometheus keeps the rest)")
    store: RateStoreSpec = Field(default_factory=RateStoreSpec, description="limit counters and usage")
    open: bool = Field(
        False,
        description=("serve without API keys on an address other than loopback, on purpose: anyone who reaches the "
                     "port may call every model and push, promote and delete adapters. Without it such a config "
                     "(and any rendered RayService, whose proxy listens on 0.0.0.0) is refused when auth is off"))

    @model_validator(mode="after")
    def _open_means_no_keys(self) -> AuthSpec:
        if self.open and self.enabled:
            raise ValueError("auth.open: true declares a gateway without keys, but this auth sets a key source "
                             "(api_keys_env, keys_file or keys_env): remove one or the other")
        return self

    @property
    def enabled(self) -> bool:
        return bool(self.api_keys_env or self.keys_file or self.keys_env)


class LimitsSpec(SectionModel):
    """Request limits enforced by the gateway before anything reaches the engine."""

    max_body_bytes: int = Field(8 * 2**20, ge=1024, description="largest request body (413 above)")
    max_images_per_request: int = Field(32, ge=0, description="image parts per request (400 above)")
    max_image_bytes: int = Field(2 * 2**20, ge=1, description="largest decoded image (413 above)")
    max_image_pixels: int = Field(
        2048 * 2048, ge=1,
        description="largest image in pixels (width x height from its header, checked before decoding; 413 above)")
    max_request_pixels: int = Field(
        16 * 2**20, ge=1,
        description="image pixels in all in one request: bounds the vision work per request (413 above)")
    max_choices: int = Field(
        16, ge=1, description="largest `n` (and `best_of`): completions generated per request (400 above)")
    max_upload_bytes: int = Field(
        4 * 2**30, ge=1024,
        description="largest adapter upload (`POST /v1/adapters/{name}/versions`, a tar of the folder; 413 above)")


__all__ = ["MIN_SECRET_LENGTH", "ApiKeySpec", "AuthSpec", "KeyFileSpec", "KeyLimitsSpec", "LimitsSpec",
           "RateStoreSpec", "Role"]
