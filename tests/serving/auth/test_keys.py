"""API keys: the key file, hashing, scopes and roles, reloading within the TTL (no Ray, no engine)."""

from __future__ import annotations

import json

import pytest
import yaml

from serving.auth import CALLER, Caller, KeyRing, authorize_model, digest, parse_key_file, visible
from serving.config import AuthSpec, ServingConfig
from serving.errors import Forbidden, ModelAccessDenied

A, B, ADMIN = "sk-team-a-0123456789", "sk-team-b-0123456789", "sk-admin-0123456789ab"


def key_file(**overrides) -> dict:
    keys = [
        {"name": "team-a", "role": "inference", "models": ["maze-tiny", "maze-tiny:team-a-*"], "secrets": [A],
         "limits": {"requests": 60}},
        {"name": "team-b", "role": "publisher", "models": ["maze-tiny:team-b-*"], "sha256": [digest(B)]},
        {"name": "ops", "role": "admin", "models": ["*"], "secrets": [ADMIN]},
    ]
    return {"keys": keys, **overrides}


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_key_file_is_held_as_digests_only():
    keys = parse_key_file(yaml.safe_dump(key_file()))
    assert set(keys) == {digest(A), digest(B), digest(ADMIN)}
    assert not any(s in repr(keys) for s in (A, B, ADMIN))
    assert keys[digest(A)].name == "team-a" and keys[digest(A)].limits.requests == 60
    assert keys[digest(B)].role == "publisher"


@pytest.mark.parametrize(("patch", "match"), [
    ({"keys": [{"name": "x", "models": ["*"]}]}, "no secret"),
    ({"keys": [{"name": "x", "models": ["*"], "secrets": ["short"]}]}, "at least 16"),
    ({"keys": [{"name": "x", "models": ["*"], "sha256": ["abc"]}]}, "64 lowercase hex"),
    ({"keys": [{"name": "x", "models": [], "secrets": [A]}]}, "at least 1"),
    ({"keys": [{"name": "x", "role": "root", "models": ["*"], "secrets": [A]}]}, "inference"),
    ({"keys": [{"name": "x", "models": ["*"], "secrets": [A], "rpm": 3}]}, "Extra inputs"),
    ({"keys": [{"name": "x", "models": ["*"], "secrets": [A]}, {"name": "x", "models": ["*"], "secrets": [B]}]},
     "unique"),
    ({"keys": [{"name": "x", "models": ["*"], "secrets": [A]}, {"name": "y", "models": ["*"], "secrets": [A]}]},
     "share a secret"),
])
def test_bad_key_files_are_clear_errors(patch, match):
    with pytest.raises(ValueError, match=match):
        parse_key_file(json.dumps(patch))


def test_scopes_and_roles():
    keys = parse_key_file(yaml.safe_dump(key_file()))
    a, b, admin = keys[digest(A)], keys[digest(B)], keys[digest(ADMIN)]
    assert a.may_call("maze-tiny") and a.may_call("maze-tiny:team-a-x") and a.may_call("maze-tiny:team-a-x@0123456789ab")
    assert not a.may_call("maze-tiny:team-b-x") and not a.may_call("other") and not a.may_call("maze-tiny:maze-grpo")
    assert b.may_call("maze-tiny:team-b-x") and not b.may_call("maze-tiny")
    bases = ["maze-tiny"]
    assert not a.may_manage("push", "team-a-x", bases)  # inference: no publishing at all
    assert b.may_manage("push", "team-b-x", bases) and b.may_manage("canary", "team-b-x", bases)
    assert b.may_manage("promote", "team-b-x", bases)
    assert not b.may_manage("promote", "team-a-x", bases) and not b.may_manage("push", "maze-grpo", bases)
    assert not b.may_manage("remove", "team-b-x", bases)  # deleting files is the admin's
    assert all(admin.may_manage(act, "anything", bases) for act in ("push", "promote", "rollback", "remove"))
    with pytest.raises(Forbidden, match="role is 'inference'") as info:
        a.check_manage("push", "team-a-x", bases)
    assert info.value.status_code == 403
    with pytest.raises(Forbidden, match="do not cover 'team-a-x'"):
        b.check_manage("promote", "team-a-x", bases)


def test_flat_api_keys_are_admins_over_everything(monkeypatch):
    monkeypatch.setenv("FLAT_KEYS", "k1, k2,")
    ring = KeyRing(AuthSpec(api_keys_env="FLAT_KEYS"))
    p = ring.lookup("k2")
    assert p is not None and p.role == "admin" and p.models == ("*",) and p.name == f"key-{digest('k2')[:8]}"
    assert not p.limited
    assert ring.lookup("k3") is None and ring.lookup(None) is None and ring.lookup("") is None


def test_keys_reload_within_the_ttl_and_a_bad_edit_keeps_the_last_good_set(tmp_path):
    path, clock = tmp_path / "keys.yaml", Clock()
    path.write_text(yaml.safe_dump(key_file()))
    ring = KeyRing(AuthSpec(keys_file=str(path), reload_s=30), clock=clock)
    assert ring.lookup(A).name == "team-a"
    revoked = key_file()
    revoked["keys"] = revoked["keys"][1:]  # team-a revoked
    path.write_text(yaml.safe_dump(revoked))
    clock.t += 29
    assert ring.lookup(A) is not None  # within the TTL the loaded set answers
    clock.t += 2
    assert ring.lookup(A) is None and ring.lookup(B).name == "team-b"
    path.write_text("keys: [{name: broken")  # a bad edit
    clock.t += 31
    assert ring.lookup(B).name == "team-b"  # kept
    path.unlink()
    clock.t += 31
    assert ring.lookup(B).name == "team-b"


def test_keys_env_and_flat_keys_together(monkeypatch):
    monkeypatch.setenv("KEYS_YAML", yaml.safe_dump(key_file()))
    monkeypatch.setenv("FLAT", "sk-flat-key")
    ring = KeyRing(AuthSpec(keys_env="KEYS_YAML", api_keys_env="FLAT"))
    assert ring.lookup(B).name == "team-b" and ring.lookup("sk-flat-key").role == "admin"
    monkeypatch.delenv("KEYS_YAML")
    assert KeyRing(AuthSpec(keys_env="KEYS_YAML")).lookup(B) is None  # unset: nothing loads, every key is 401


def test_model_checks_follow_the_caller():
    keys = parse_key_file(yaml.safe_dump(key_file()))
    assert visible("maze-tiny:team-b-x")  # no caller: auth off
    token = CALLER.set(Caller(keys[digest(A)]))
    try:
        assert visible("maze-tiny") and not visible("maze-tiny:team-b-x")
        with pytest.raises(ModelAccessDenied) as info:
            authorize_model("maze-tiny:team-b-x")
        err = info.value.to_openai()["error"]
        assert err == {"message": "The model `maze-tiny:team-b-x` does not exist or you do not have access to it.",
                       "type": "invalid_request_error", "code": "model_not_found"}
        assert info.value.status_code == 404
    finally:
        CALLER.reset(token)


def test_shipped_configs_auth():
    assert not ServingConfig.shipped("embedded").auth.enabled  # loopback, no keys: today's behaviour
    prod = ServingConfig.shipped("production").auth
    assert prod.enabled and prod.keys_file and prod.store.kind == "redis"
