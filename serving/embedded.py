"""The embedded stack: a local S3 server, a local Ray and the gateway app, all on 127.0.0.1.

``maze-serve up`` (and ``maze-eval`` with no endpoint) use it so the product runs on a laptop or
in CI with no GPU and no cloud account.
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

from serving.config import ServingConfig

LOCAL_S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "maze-local", "AWS_SECRET_ACCESS_KEY": "maze-local"}


def is_local(url: str | None) -> bool:
    return bool(url) and urlparse(url).hostname in ("127.0.0.1", "localhost", "::1")


def s3_env(cfg: ServingConfig) -> dict[str, str]:
    """Environment for S3 clients of this config (set in this process too).

    A local S3 server accepts any credentials; real S3 uses the normal AWS chain untouched.
    """
    env: dict[str, str] = {"AWS_DEFAULT_REGION": cfg.adapters.region}
    if cfg.adapters.endpoint_url:
        env["AWS_ENDPOINT_URL_S3"] = cfg.adapters.endpoint_url
    if is_local(cfg.adapters.endpoint_url):
        env.update({k: os.environ.get(k, v) for k, v in LOCAL_S3_CREDENTIALS.items()})
    for k, v in env.items():
        os.environ.setdefault(k, v)
    return env
