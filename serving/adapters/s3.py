"""The adapter store's one boundary to S3: the client environment, the calls and their errors.

:func:`s3_env` is a pure function of the config (the app builder puts it in each deployment's
runtime env); :func:`export_s3_env` sets it in this process for clients created here (the CLI,
the ingress, the embedded stack's seeding, ``maze-train publish``).

:class:`S3Bucket` is every S3 call the store and the placement state make, with boto's errors
translated once: a missing object is ``KeyError``, a lost conditional write :class:`ObjectChanged`,
anything else :class:`~serving.errors.AdapterStoreUnavailable` (503), never "not found", so an
outage is not remembered as a missing adapter. That 503 reaches clients, so its message names the
failure's kind and never the endpoint (botocore's own error, which does, stays its cause for logs).
:meth:`S3Bucket.replace_json` is the one conditional-replace loop behind every alias move and every pin.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

from serving.config import AdapterStoreSpec, ServingConfig
from serving.errors import AdapterRefConflict, AdapterStoreUnavailable

#: A local S3 server (moto) accepts any credentials; these keep boto3 from searching for real ones.
LOCAL_S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "maze-local", "AWS_SECRET_ACCESS_KEY": "maze-local"}


def is_local(url: str | None) -> bool:
    """Whether ``url`` points at this machine (the embedded stack's S3 server)."""
    return bool(url) and urlparse(url).hostname in ("127.0.0.1", "localhost", "::1")


def s3_env(cfg: ServingConfig) -> dict[str, str]:
    """Environment for S3 clients of ``cfg``: region, endpoint, and credentials for a local server.

    Real S3 keeps the normal AWS credential chain untouched.
    """
    env: dict[str, str] = {"AWS_DEFAULT_REGION": cfg.adapters.region}
    if cfg.adapters.endpoint_url:
        env["AWS_ENDPOINT_URL_S3"] = cfg.adapters.endpoint_url
    if is_local(cfg.adapters.endpoint_url):
        env.update(LOCAL_S3_CREDENTIALS)
    return env


def export_s3_env(cfg: ServingConfig) -> dict[str, str]:
    """Set :func:`s3_env` in this process (values already set win) and return what is in effect."""
    for key, value in s3_env(cfg).items():
        os.environ.setdefault(key, value)
    return {key: os.environ[key] for key in s3_env(cfg)}


WRITE_ATTEMPTS = 5  # conditional-write retries before a replace gives up as conflicting
RETRY_HINT = "try again in a few seconds"  # an outage's 503s are retryable


class ObjectChanged(Exception):
    """A conditional write lost a race: the object changed or vanished since it was read."""


class S3Bucket:
    """One bucket of the adapter store, through a boto3 client made on first use."""

    def __init__(self, spec: AdapterStoreSpec, client: Any | None = None):
        self.spec, self.name = spec, spec.bucket
        self._client = client

    @property
    def client(self):
        if self._client is None:
            import boto3
            from botocore.config import Config

            self._client = boto3.client(
                "s3", endpoint_url=self.spec.endpoint_url, region_name=self.spec.region,
                config=Config(connect_timeout=3, read_timeout=10, retries={"max_attempts": 2, "mode": "standard"}),
            )
        return self._client

    def call(self, fn: str, **kwargs):
        """``client.<fn>(Bucket=..., **kwargs)``; missing: KeyError, lost condition: ObjectChanged.

        Raises:
            AdapterStoreUnavailable (503): any other S3 failure, or S3 unreachable; its message names
                the failure's kind, never the endpoint or a key (clients see it; its cause has the rest).
        """
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self.client, fn)(Bucket=self.name, **kwargs)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("NoSuchKey", "404", "NotFound"):
                raise KeyError(kwargs.get("Key")) from None
            if code in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                raise ObjectChanged(kwargs.get("Key")) from None
            raise AdapterStoreUnavailable(f"S3 {fn} failed ({code or type(exc).__name__}); {RETRY_HINT}") from exc
        except BotoCoreError as exc:
            # botocore's text names the endpoint URL: it stays the cause (the gateway's log, a CLI's
            # --verbose), and the message names only the kind.
            raise AdapterStoreUnavailable(f"S3 unreachable ({type(exc).__name__}); {RETRY_HINT}") from exc

    def read_json(self, key: str) -> tuple[dict[str, Any] | None, str | None]:
        """The JSON document at ``key`` and its ETag, or (None, None) when there is none."""
        try:
            obj = self.call("get_object", Key=key)
        except KeyError:
            return None, None
        return json.loads(obj["Body"].read()), obj.get("ETag")

    def put_json(self, key: str, doc: dict[str, Any], **condition: str) -> None:
        self.call("put_object", Key=key, Body=json.dumps(doc).encode(), ContentType="application/json", **condition)

    def replace_json(self, key: str, change: Callable[[dict[str, Any] | None], dict[str, Any] | None],
                     what: str) -> dict[str, Any] | None:
        """Replace the document at ``key`` with ``change(current)`` in one conditional PUT (``If-Match``
        the ETag read, ``If-None-Match: *`` when new), re-reading and re-applying on a lost race.

        ``change`` returns None to leave the document as it is, and may raise to refuse. Returns the
        document now in force.

        Raises:
            AdapterRefConflict (409): ``what`` changed concurrently on every attempt.
        """
        for _ in range(WRITE_ATTEMPTS):
            doc, etag = self.read_json(key)
            new = change(doc)
            if new is None:
                return doc
            try:
                self.put_json(key, new, **({"IfMatch": etag} if etag else {"IfNoneMatch": "*"}))
            except (ObjectChanged, KeyError):  # KeyError: the document was removed since it was read
                continue
            return new
        raise AdapterRefConflict(f"{what} changed concurrently {WRITE_ATTEMPTS} times; try again")


__all__ = ["LOCAL_S3_CREDENTIALS", "ObjectChanged", "S3Bucket", "export_s3_env", "is_local", "s3_env"]
