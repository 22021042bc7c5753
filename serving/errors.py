"""Serving errors: each carries the HTTP status and OpenAI error type it maps to.

One exception handler in the gateway turns them into ``{"error": {"message", "type", "code"}}``;
the pure-ASGI middlewares, which answer before any handler runs, write the same body with
:func:`send_openai_error`. They hold only strings, so they stay picklable across Ray actors.
"""

from __future__ import annotations

import json


class ServingError(Exception):
    """Root of serving errors."""

    status_code = 500
    error_type = "internal_error"
    code = "internal_error"

    def to_openai(self) -> dict:
        return {"error": {"message": str(self), "type": self.error_type, "code": self.code}}


class BadAdapterName(ServingError):
    status_code, error_type, code = 400, "invalid_request_error", "invalid_model_name"


class AdapterInvalid(ServingError):
    status_code, error_type, code = 400, "invalid_request_error", "invalid_adapter"


class AdapterNotServable(AdapterInvalid):
    """A well-formed adapter the engine would not serve as trained (modules it does not apply, peft
    features it refuses): refused before publishing."""

    code = "adapter_not_servable"


class Unauthorized(ServingError):
    status_code, error_type, code = 401, "authentication_error", "invalid_api_key"


class Forbidden(ServingError):
    """The key is valid but its role or scope does not allow the action."""

    status_code, error_type, code = 403, "permission_error", "insufficient_permissions"


class ModelNotFound(ServingError):
    status_code, error_type, code = 404, "invalid_request_error", "model_not_found"


class ModelAccessDenied(ModelNotFound):
    """A model outside the key's scope: answered as OpenAI answers a model that is missing or not
    the key's, so a key learns nothing about models it may not use."""

    @classmethod
    def of(cls, model: str) -> ModelAccessDenied:
        return cls(f"The model `{model}` does not exist or you do not have access to it.")


class RateLimited(ServingError):
    """A key over its request or concurrency limit (OpenAI's type ``requests``)."""

    status_code, error_type, code = 429, "requests", "rate_limit_exceeded"


class TokenRateLimited(RateLimited):
    """A key over its token limit (OpenAI's type ``tokens``)."""

    error_type = "tokens"


class LimitStoreUnavailable(ServingError):
    """The shared limit store cannot be reached and the config says to fail closed."""

    status_code, error_type, code = 503, "service_unavailable", "limit_store_unavailable"


class KeysUnavailable(ServingError):
    """The gateway cannot read its API keys (a key source missing or invalid past its grace): every
    key it held is refused, as a server fault rather than the caller's."""

    status_code, error_type, code = 503, "service_unavailable", "api_keys_unavailable"


class AdapterNotFound(ModelNotFound):
    code = "adapter_not_found"


class AdapterExists(ServingError):
    status_code, error_type, code = 409, "invalid_request_error", "adapter_exists"


class NoRollbackTarget(ServingError):
    """The alias has never pointed at another version: there is nothing to roll back to."""

    status_code, error_type, code = 409, "invalid_request_error", "no_rollback_target"


class AdapterRefConflict(ServingError):
    """The alias kept changing under concurrent writers; the move was not made."""

    status_code, error_type, code = 409, "invalid_request_error", "adapter_ref_conflict"


class NoCanary(ServingError):
    """The adapter runs no canary: there is none to promote or abort."""

    status_code, error_type, code = 409, "invalid_request_error", "no_canary"


class ParityNotPassed(ServingError):
    """The version's recorded parity check did not pass: it does not start serving (promote, canary,
    rollback, push) unless an admin forces it."""

    status_code, error_type, code = 409, "invalid_request_error", "adapter_parity_not_passed"


class ParityFailed(ParityNotPassed):
    """The version's recorded parity check failed (served outputs differ from its reference)."""

    code = "adapter_parity_failed"


class ParityNotCompared(ParityNotPassed):
    """The version's parity was checked only against the base's served output (no reference where it
    was measured), and the store's config does not let such a check suffice."""

    code = "adapter_parity_not_compared"


class ParityNotMeasured(ParityNotPassed):
    """The version has no parity record, and the move needs one that passed: the offline gate never
    promotes a version whose served output was not checked against what it was trained as."""

    code = "adapter_parity_not_measured"


class RequestTooLarge(ServingError):
    status_code, error_type, code = 413, "invalid_request_error", "request_too_large"


class BadRequest(ServingError):
    status_code, error_type, code = 400, "invalid_request_error", "bad_request"


class BadConfig(ServingError):
    """A serving config that does not load or validate, or that the chosen target cannot run."""

    status_code, error_type, code = 400, "invalid_request_error", "bad_config"


class AdapterLoadFailed(ServingError):
    status_code, error_type, code = 422, "invalid_request_error", "adapter_load_failed"


class AdapterNotApplied(AdapterLoadFailed):
    """The engine would leave out part of the adapter (modules in the vision tower with tower LoRA off,
    tensors that name no module of the base): serving it would answer as another model."""

    code = "adapter_not_applied"


class AdapterIntegrityError(AdapterLoadFailed):
    """An adapter version's files do not hash to its version: the stored objects changed after
    publishing (overwritten or corrupted), so they are not what was published under that version."""

    code = "adapter_integrity_failed"


class ReplicaUnavailable(ServingError):
    """The engine replica serving the request was lost (its node died, its actor crashed): the
    request may be retried and will reach a replica that lives (a client's retry policy should)."""

    status_code, error_type, code = 503, "service_unavailable", "replica_unavailable"


class AdapterStoreUnavailable(ServingError):
    status_code, error_type, code = 503, "service_unavailable", "adapter_store_unavailable"


class InvalidCanary(BadRequest):
    """A canary that cannot be set up as asked (weight out of range, the version already served)."""

    code = "invalid_canary"


class MissingParameter(BadRequest):
    code = "missing_required_parameter"


class InvalidImage(BadRequest):
    code = "invalid_image"


class ImageTooLarge(RequestTooLarge):
    code = "image_too_large"


class TooManyPins(ServingError):
    """Pinning would leave no adapter slot of a replica for the names that are not pinned."""

    status_code, error_type, code = 409, "invalid_request_error", "too_many_pins"


class NotPinned(ServingError):
    """Unpinning a name that is not pinned."""

    status_code, error_type, code = 404, "invalid_request_error", "not_pinned"


async def send_openai_error(send, exc: ServingError, headers: list[tuple[bytes, bytes]] = ()) -> None:
    """Answer an ASGI request with ``exc`` in OpenAI's error shape (status, JSON body, ``headers``)."""
    data = json.dumps(exc.to_openai()).encode()
    await send({"type": "http.response.start", "status": exc.status_code,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": data})
