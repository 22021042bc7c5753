"""API keys: the key file, hashing, scopes and roles, reloading within the TTL, revocation and the
grace of a broken key source, errors that show no secret (no Ray, no engine)."""

from __future__ import annotations

import json
import logging

import httpx
import pytest
import yaml

from serving.auth import CALLER, Gate, GateMiddleware, authorize_model, visible
from serving.auth.caller import Caller
from serving.auth.keys import KeyRing, KeySourceError, digest, load_key_file, parse_key_file
from serving.config import MIN_SECRET_LENGTH, AuthSpec, ServingConfig
from serving.errors import Forbidden, KeysUnavailable, ModelAccessDenied

A, B, ADMIN = "sk-team-a-0123456789", "sk-team-b-0123456789", "sk-admin-0123456789ab"


def key_file(**overrides) -> dict:
    keys = [
        {"name": "team-a", "role": "inference", "models": ["maze-tiny", "maze-tiny:team-a-*"], "secrets": [A],
         "limits": {"requests": 60}},
        {"name": "team-b", "role": "publisher", "models": ["maze-tiny:team-b-*"], "sha256": [digest(B)],
         "min_secret_length": 20},
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
    ({"keys": [{"name": "x", "models": ["*"], "secrets": ["short"]}]}, "at least 16"),
    ({"keys": [{"name": "x", "models": ["*"], "sha256": ["abc"], "min_secret_length": 32}]}, "64 lowercase hex"),
    ({"keys": [{"name": "x", "models": ["*"], "sha256": [digest(A)], "min_secret_length": 8}]},
     "min_secret_length must be at least 16"),
    ({"keys": [{"name": "x", "models": ["*"], "secrets": [A], "min_secret_length": 32}]}, "at least 32 characters"),
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


def test_keys_reload_within_the_ttl(tmp_path):
    path, clock = tmp_path / "keys.yaml", Clock()
    path.write_text(yaml.safe_dump(key_file()))
    ring = KeyRing(AuthSpec(keys_file=str(path), reload_s=30), clock=clock)
    assert ring.lookup(A).name == "team-a"
    revoked = key_file()
    revoked["keys"] = revoked["keys"][1:]  # team-a's entry removed
    path.write_text(yaml.safe_dump(revoked))
    clock.t += 29
    assert ring.lookup(A) is not None  # within the TTL the loaded set answers
    clock.t += 2
    assert ring.lookup(A) is None and ring.lookup(B).name == "team-b"


def test_a_key_without_secrets_or_disabled_is_refused_and_the_rest_still_load(tmp_path):
    path, clock = tmp_path / "keys.yaml", Clock()
    rotating = key_file()
    rotating["keys"][0]["secrets"] = [A, A + "-next"]  # rotation: both secrets answer
    path.write_text(yaml.safe_dump(rotating))
    ring = KeyRing(AuthSpec(keys_file=str(path), reload_s=30), clock=clock)
    assert ring.lookup(A).name == "team-a" and ring.lookup(A + "-next").name == "team-a"
    rotating["keys"][0]["secrets"] = [A + "-next"]  # the old secret retired
    path.write_text(yaml.safe_dump(rotating))
    clock.t += 31
    assert ring.lookup(A) is None and ring.lookup(A + "-next").name == "team-a"
    rotating["keys"][0]["secrets"] = []  # the last secret removed: team-a revoked, nothing else
    rotating["keys"][2]["disabled"] = True  # ops disabled, its secret still in the file
    path.write_text(yaml.safe_dump(rotating))
    clock.t += 31
    assert ring.lookup(A + "-next") is None and ring.lookup(ADMIN) is None
    assert ring.lookup(B).name == "team-b"
    assert parse_key_file(yaml.safe_dump({"keys": []})) == {}  # an explicit empty list revokes every key


def test_digest_entries_declare_their_tokens_length():
    entry = {"name": "x", "models": ["*"], "sha256": [digest(A)], "min_secret_length": 20}
    loaded = load_key_file(json.dumps({"keys": [entry]}))
    assert loaded.keys[digest(A)].name == "x" and loaded.keys[digest(A)].min_token_length == 20
    assert loaded.notices == ()


def test_a_digest_entry_of_an_earlier_release_loads_with_a_migration_notice_and_the_floor(tmp_path, caplog):
    """A `sha256` entry without `min_secret_length` (key files written before the field) loads with
    the gateway's floor, applied to each request's token, and a notice naming the entry and what to add."""
    short = "sk-short-0123"  # 13 characters, under the floor of 16
    old = {"keys": [{"name": "ops", "role": "admin", "models": ["*"], "secrets": [ADMIN]},
                    {"name": "team-b", "models": ["*"], "sha256": [digest(B), digest(short)]}]}
    loaded = load_key_file(yaml.safe_dump(old))
    assert loaded.keys[digest(B)].name == "team-b" and loaded.keys[digest(B)].min_token_length == MIN_SECRET_LENGTH
    assert loaded.notices == (
        "keys[1] ('team-b'): `sha256` without `min_secret_length`: tokens shorter than 16 characters are refused; add "
        "`min_secret_length: N` to this entry, N the length of the shortest token behind its digests (at least 16)",)
    path, clock = tmp_path / "keys.yaml", Clock()
    path.write_text(yaml.safe_dump(old))
    ring = KeyRing(AuthSpec(keys_file=str(path), reload_s=30), clock=clock)
    caplog.set_level(logging.WARNING, logger="serving.auth.keys")
    assert ring.lookup(B).name == "team-b" and ring.lookup(ADMIN).name == "ops"
    assert ring.lookup(short) is None and ring.lookup(short) is None  # its digest matches; too short: 401
    notices = [r for r in caplog.records if "without `min_secret_length`" in r.getMessage()]
    refusals = [r for r in caplog.records if "shorter than the key's 16-character floor" in r.getMessage()]
    assert len(notices) == 1 and len(refusals) == 1 and "'team-b'" in refusals[0].getMessage()
    assert not any(short in r.getMessage() for r in caplog.records)
    clock.t += 31  # the same file read again: the notice is not repeated at every reload
    assert ring.lookup(B).name == "team-b"
    assert len([r for r in caplog.records if "without `min_secret_length`" in r.getMessage()]) == 1
    declared = {"keys": [{**old["keys"][1], "min_secret_length": 24}]}  # B is 20 long: under what is declared
    assert load_key_file(yaml.safe_dump(declared)).notices == ()
    path.write_text(yaml.safe_dump(declared))
    clock.t += 31
    assert ring.lookup(B) is None


class Counted:
    """Stands in for serving.metrics.metric: the key source errors counted, by reason."""

    def __init__(self) -> None:
        self.reasons: list[str] = []

    def __call__(self, name: str):
        assert name == "key_source_errors"
        return self

    def inc(self, tags: dict) -> None:
        self.reasons.append(tags["reason"])


@pytest.fixture
def counted(monkeypatch) -> Counted:
    counter = Counted()
    monkeypatch.setattr("serving.auth.keys.metric", counter)
    return counter


@pytest.mark.parametrize(("edit", "reason"), [
    (lambda p: p.write_text("keys: [{name: broken"), "yaml"),
    (lambda p: p.write_text(json.dumps({"keys": [{"name": "x", "models": "*", "secrets": A}]})), "invalid"),
    (lambda p: p.write_text(""), "empty"),
    (lambda p: p.unlink(), "missing"),
], ids=["yaml", "invalid", "empty", "missing"])
def test_a_broken_key_file_keeps_the_last_keys_for_the_grace_then_refuses(tmp_path, counted, caplog, edit, reason):
    path, clock = tmp_path / "keys.yaml", Clock()
    path.write_text(yaml.safe_dump(key_file()))
    ring = KeyRing(AuthSpec(keys_file=str(path), reload_s=30, keys_grace_s=120), clock=clock)
    assert ring.lookup(B).name == "team-b"
    edit(path)
    clock.t += 30
    caplog.set_level(logging.ERROR, logger="serving.auth.keys")
    assert ring.lookup(B).name == "team-b" and ring.lookup("sk-unknown-0123456789") is None  # kept: the grace
    assert counted.reasons == [reason] and "kept 120s more (auth.keys_grace_s)" in caplog.text
    clock.t += 119
    assert ring.lookup(B).name == "team-b"
    clock.t += 1  # 120 s after the first failed read: refused, as a fault of the gateway
    with pytest.raises(KeysUnavailable, match="cannot read its API keys") as info:
        ring.lookup(B)
    assert info.value.status_code == 503 and info.value.code == "api_keys_unavailable"
    with pytest.raises(KeysUnavailable):
        ring.lookup("sk-unknown-0123456789")
    assert ring.lookup(None) is None  # no key at all stays a 401
    assert counted.reasons == [reason] * 3 and "past auth.keys_grace_s" in caplog.text
    path.write_text(yaml.safe_dump(key_file()))  # fixed: read again at the next reload
    clock.t += 30
    assert ring.lookup(B).name == "team-b" and ring.lookup("sk-unknown-0123456789") is None


def test_a_key_source_that_never_loaded_refuses_at_once(tmp_path, monkeypatch, counted):
    path = tmp_path / "keys.yaml"
    path.write_text("keys: [{name: broken")
    with pytest.raises(KeysUnavailable):
        KeyRing(AuthSpec(keys_file=str(path))).lookup(A)
    monkeypatch.delenv("KEYS_YAML", raising=False)
    with pytest.raises(KeysUnavailable):
        KeyRing(AuthSpec(keys_env="KEYS_YAML")).lookup(B)  # unset
    assert counted.reasons == ["yaml", "missing"]


def test_keys_env_and_flat_keys_together(monkeypatch, counted):
    monkeypatch.setenv("KEYS_YAML", yaml.safe_dump(key_file()))
    monkeypatch.setenv("FLAT", "sk-flat-key")
    clock = Clock()
    ring = KeyRing(AuthSpec(keys_env="KEYS_YAML", api_keys_env="FLAT", keys_grace_s=0), clock=clock)
    assert ring.lookup(B).name == "team-b" and ring.lookup("sk-flat-key").role == "admin"
    monkeypatch.setenv("KEYS_YAML", "")  # emptied, no grace: its keys refused; the flat keys still answer
    clock.t += 31
    assert ring.lookup("sk-flat-key").role == "admin"
    with pytest.raises(KeysUnavailable):
        ring.lookup(B)
    assert counted.reasons == ["empty"]


# Bad edits with a token in them: a syntax error after it, in a wrong type, in a wrong field, as a
# field's name, as a name (the entry broken), beside a name that is part of it, in a clash, as an
# alias, as the whole file, after a tab.
TOKEN = "sk-pasted-zq7Xv93KLm0pWt4e"
LEAKY_EDITS = [
    f"keys:\n  - name: team-a\n    models: ['*']\n    secrets: [{TOKEN}\n",
    json.dumps({"keys": [{"name": "team-a", "models": ["*"], "secrets": TOKEN}]}),
    json.dumps({"keys": [{"name": "team-a", "models": ["*"], "secrets": [{"value": TOKEN}]}]}),
    json.dumps({"keys": [{"name": "team-a", "models": ["*"], "sha256": [TOKEN], "min_secret_length": 26}]}),
    json.dumps({"keys": [{"name": "team-a", "models": ["*"], TOKEN: True}]}),
    json.dumps({"keys": [{"name": TOKEN, "models": ["*"], "role": "root"}]}),
    json.dumps({"keys": [{"name": "pasted-zq7Xv93K", "models": ["*"], "secrets": [TOKEN], "limits": "x"}]}),
    json.dumps({"keys": [{"name": "x", "models": ["*"], "secrets": [TOKEN]},
                         {"name": "y", "models": ["*"], "secrets": [TOKEN]}]}),
    f"keys: *{TOKEN}\n",
    TOKEN,
    f"keys:\n\t- {TOKEN}\n",
]


def shows_token(text: str) -> bool:
    return any(TOKEN[i:i + 8] in text for i in range(len(TOKEN) - 7))


@pytest.mark.parametrize("edit", LEAKY_EDITS)
def test_key_file_errors_show_no_secret(tmp_path, edit, caplog, counted):
    with pytest.raises(KeySourceError) as info:
        parse_key_file(edit)
    message = str(info.value)
    assert not shows_token(message), message
    assert info.value.__context__ is None and info.value.__cause__ is None  # YAML's or pydantic's text not chained
    path = tmp_path / "keys.yaml"
    path.write_text(yaml.safe_dump(key_file()))
    ring = KeyRing(AuthSpec(keys_file=str(path), reload_s=0), clock=Clock())
    ring.lookup(A)
    path.write_text(edit)
    caplog.set_level(logging.DEBUG)
    ring.lookup(A)
    assert caplog.records and not any(shows_token(r.getMessage()) or r.exc_info for r in caplog.records)


def test_key_file_errors_name_the_entry_and_the_field():
    def error(edit: str) -> str:
        with pytest.raises(KeySourceError) as info:
            parse_key_file(edit)
        return str(info.value)

    assert error(LEAKY_EDITS[0]) == "not valid YAML at line 5, column 1"
    assert error(LEAKY_EDITS[3]).startswith("not a valid key file: keys[0] ('team-a').sha256: Value error, sha256 "
                                            "entries must be 64 lowercase hex digits")
    assert error(LEAKY_EDITS[4]) == "not a valid key file: keys[0] ('team-a').<unknown field>: Extra inputs are not " \
                                    "permitted"
    # A name that may be (part of) a token is left out; the entry is named by its index.
    assert error(LEAKY_EDITS[5]) == ("not a valid key file: keys[0].role: Input should be 'inference', 'publisher' "
                                     "or 'admin'")
    assert error(LEAKY_EDITS[6]) == "not a valid key file: keys[0].limits: Input should be a valid dictionary or " \
                                    "instance of KeyLimitsSpec"
    assert error(LEAKY_EDITS[7]) == "keys[0] ('x') and keys[1] ('y') share a secret"


async def test_the_gateway_answers_503_once_the_keys_are_refused(tmp_path, counted):
    from serving.ingress.middleware import GatewayMiddleware

    path = tmp_path / "keys.yaml"
    path.write_text(yaml.safe_dump(key_file()))

    async def ok(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    gate = Gate(AuthSpec(keys_file=str(path), reload_s=0, keys_grace_s=0))
    app = GatewayMiddleware(GateMiddleware(ok, gate=gate), max_body_bytes=4096)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as client:
        assert (await client.get("/v1/models", headers={"Authorization": f"Bearer {A}"})).status_code == 200
        path.unlink()
        resp = await client.get("/v1/models", headers={"Authorization": f"Bearer {A}"})
        assert resp.status_code == 503, resp.text
        assert resp.json() == {"error": {"message": "the gateway cannot read its API keys; requests are refused until "
                                                    "its operators restore them",
                                         "type": "service_unavailable", "code": "api_keys_unavailable"}}
        assert (await client.get("/v1/models")).status_code == 401


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
