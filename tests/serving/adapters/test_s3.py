"""serving.adapters.s3: the S3 client environment of a config (pure), its export into this process, and the
store settings read back from it (spec_from_env)."""

from __future__ import annotations

import os

from serving.adapters import export_s3_env, s3_env, spec_from_env
from serving.adapters.s3 import LOCAL_S3_CREDENTIALS
from serving.config import ServingConfig


def _cfg(endpoint_url: str | None) -> ServingConfig:
    d = ServingConfig.shipped("embedded").model_dump(mode="json")
    d["adapters"]["endpoint_url"] = endpoint_url
    return ServingConfig.model_validate(d)


def test_a_local_endpoint_gets_local_credentials_and_real_s3_keeps_the_aws_chain(monkeypatch):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(key, raising=False)
    before = dict(os.environ)
    local = s3_env(_cfg("http://127.0.0.1:9000"))
    assert local["AWS_ENDPOINT_URL_S3"] == "http://127.0.0.1:9000"
    assert {k: local[k] for k in LOCAL_S3_CREDENTIALS} == LOCAL_S3_CREDENTIALS
    real = s3_env(_cfg(None))
    assert set(real) == {"AWS_DEFAULT_REGION"}
    assert dict(os.environ) == before  # pure: nothing set in this process


def test_export_sets_what_is_missing_and_keeps_what_is_set(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "mine")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    env = export_s3_env(_cfg("http://localhost:9000"))
    assert os.environ["AWS_ACCESS_KEY_ID"] == env["AWS_ACCESS_KEY_ID"] == "mine"
    assert os.environ["AWS_SECRET_ACCESS_KEY"] == LOCAL_S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]
    assert os.environ["AWS_ENDPOINT_URL_S3"] == "http://localhost:9000"


def test_spec_from_env_is_the_store_a_replica_sees(monkeypatch):
    """An LLM replica knows only the store's prefix and the environment the app builder gave it (s3_env)."""
    for key, value in s3_env(_cfg("http://127.0.0.1:9000")).items():
        monkeypatch.setenv(key, value)
    spec = spec_from_env("s3://adapters/lora")
    assert (spec.prefix, spec.endpoint_url, spec.region) == ("s3://adapters/lora", "http://127.0.0.1:9000", "us-east-1")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    bare = spec_from_env("s3://adapters/lora")
    assert (bare.endpoint_url, bare.region) == (None, "us-east-1")  # real S3, the default region
