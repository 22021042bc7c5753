"""S3 behind the adapter store's door (:class:`~serving.adapters.objects.ObjectStore`): the one file that
names boto's calls and imports botocore, and the S3 client environment.

:func:`s3_env` is a pure function of the config (the app builder puts it in each deployment's
runtime env); :func:`export_s3_env` sets it in this process for clients created here (the CLI,
the ingress, the embedded stack's seeding, ``maze-train publish``); :func:`spec_from_env` builds the
store's settings back from that environment where only the prefix is known (an LLM replica's
adapter loader and its placement agent).

:class:`S3Objects` is every S3 call the store and the placement state make (``s3://bucket/prefix``),
with boto's errors translated once: a missing object is ``KeyError``, a lost conditional write
:class:`~serving.adapters.objects.ObjectChanged`, anything else
:class:`~serving.errors.AdapterStoreUnavailable` (503), never "not found", so an outage is not
remembered as a missing adapter. That 503 reaches clients, so its message names the failure's kind
and never the endpoint (botocore's own error, which does, stays its cause for logs).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlparse

from serving.adapters.objects import CHUNK, PAGE, ObjectChanged, ObjectStore
from serving.config import AdapterStoreSpec, ServingConfig
from serving.errors import AdapterStoreUnavailable

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


def spec_from_env(prefix: str) -> AdapterStoreSpec:
    """The store's settings for ``prefix`` from this process's S3 environment (:func:`s3_env`, which the
    app builder puts in every deployment's runtime env): what an LLM replica knows of the store."""
    return AdapterStoreSpec(prefix=prefix, endpoint_url=os.environ.get("AWS_ENDPOINT_URL_S3") or None,
                            region=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))


RETRY_HINT = "try again in a few seconds"  # an outage's 503s are retryable


class S3Objects(ObjectStore):
    """The objects under an ``s3://bucket/prefix``, through a boto3 client made on first use."""

    def __init__(self, spec: AdapterStoreSpec, client: Any | None = None):
        self.spec, self.bucket, self.root = spec, spec.bucket, spec.key_prefix
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

    @contextmanager
    def _translated(self, fn: str, key: str | None):
        """boto's errors of call ``fn`` in the project's terms (see the module)."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("NoSuchKey", "404", "NotFound"):
                raise KeyError(key) from None
            if code in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                raise ObjectChanged(key) from None
            raise AdapterStoreUnavailable(f"S3 {fn} failed ({code or type(exc).__name__}); {RETRY_HINT}") from exc
        except BotoCoreError as exc:
            # botocore's text names the endpoint URL: it stays the cause (the gateway's log, a CLI's
            # --verbose), and the message names only the kind.
            raise AdapterStoreUnavailable(f"S3 unreachable ({type(exc).__name__}); {RETRY_HINT}") from exc

    def _call(self, fn: str, **kwargs):
        """``client.<fn>(Bucket=..., **kwargs)``, its errors translated.

        Raises:
            KeyError, ObjectChanged, AdapterStoreUnavailable (503): any other S3 failure, or S3
                unreachable; its message names the failure's kind, never the endpoint or a key.
        """
        with self._translated(fn, kwargs.get("Key")):
            return getattr(self.client, fn)(Bucket=self.bucket, **kwargs)

    def get_tagged(self, key: str) -> tuple[bytes, str | None]:
        obj = self._call("get_object", Key=self.root + key)
        with self._translated("get_object", self.root + key):
            return obj["Body"].read(), obj.get("ETag")

    def stream(self, key: str, chunk_size: int = CHUNK) -> Iterator[bytes]:
        return self._chunks(self._call("get_object", Key=self.root + key)["Body"], chunk_size)

    @staticmethod
    def _chunks(body: Any, chunk_size: int) -> Iterator[bytes]:
        from botocore.exceptions import BotoCoreError

        try:
            yield from iter(lambda: body.read(chunk_size), b"")
        except BotoCoreError as exc:
            raise AdapterStoreUnavailable(f"S3 went away during the download ({type(exc).__name__}); "
                                          f"{RETRY_HINT}") from None

    def put(self, key: str, data: bytes, *, if_match: str | None = None, if_none_match: bool = False,
            content_type: str | None = None) -> None:
        extra = {"ContentType": content_type} if content_type else {}
        if if_match:
            extra["IfMatch"] = if_match
        if if_none_match:
            extra["IfNoneMatch"] = "*"
        self._call("put_object", Key=self.root + key, Body=data, **extra)

    def head(self, key: str) -> int:
        return self._call("head_object", Key=self.root + key)["ContentLength"]

    def delete(self, key: str) -> None:
        self._call("delete_object", Key=self.root + key)

    def list(self, prefix: str = "", *, start_after: str | None = None, page_size: int = PAGE) -> Iterator[str]:
        kwargs: dict[str, Any] = {"Prefix": self.root + prefix, "MaxKeys": page_size}
        if start_after:
            kwargs["StartAfter"] = self.root + start_after
        while True:
            page = self._call("list_objects_v2", **kwargs)
            for obj in page.get("Contents", []):
                yield obj["Key"][len(self.root):]
            if not page.get("IsTruncated"):
                return
            kwargs["ContinuationToken"] = page["NextContinuationToken"]

    def ensure_bucket(self) -> None:
        """Create the bucket if missing (local S3 servers start empty). Setup, not serving: boto's
        errors are left as they are (their text names the endpoint, which is what setup needs)."""
        from botocore.exceptions import ClientError

        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError:
            self.client.create_bucket(Bucket=self.bucket)


__all__ = ["LOCAL_S3_CREDENTIALS", "RETRY_HINT", "S3Objects", "export_s3_env", "is_local", "s3_env", "spec_from_env"]
