"""The S3 client environment of a serving config, for every process that talks to the adapter store.

:func:`s3_env` is a pure function of the config (the app builder puts it in each deployment's
runtime env); :func:`export_s3_env` sets it in this process for clients created here (the CLI,
the ingress, the embedded stack's seeding, ``maze-train publish``).
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

from serving.config import ServingConfig

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


__all__ = ["LOCAL_S3_CREDENTIALS", "export_s3_env", "is_local", "s3_env"]
