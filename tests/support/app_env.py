"""What building the gateway's app in the test process needs: no Ray, and the S3 env restored.

Building an app reads the driver's runtime env (``ray.get_runtime_context``), which would start a
local Ray; a stub keeps these tests in process. The ingress exports the adapter store's S3 env
into ``os.environ``; each variable is put back as it was (or removed again) after the test.
"""

from __future__ import annotations

import os
import types

S3_ENV = ("AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def isolate_app(monkeypatch) -> None:
    import ray

    monkeypatch.setattr(ray, "get_runtime_context", lambda: types.SimpleNamespace(runtime_env={}))
    for key in S3_ENV:
        if key in os.environ:
            monkeypatch.setenv(key, os.environ[key])
        else:
            monkeypatch.delenv(key, raising=False)
