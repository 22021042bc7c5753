"""``maze-serve adapters verify``, the parity column of ``list`` and ``history`` and the parity gate of
``promote``, ``canary``, ``rollback`` and ``push`` (``--force-parity``), against a real local S3
server; and the same through the gateway's management routes (the real FastAPI app over ASGI, auth
off, and auth on: forcing is an admin key's) with the CLI's client."""

from __future__ import annotations

import asyncio
import json
import uuid

import httpx
import pytest
from click.testing import CliRunner

from serving.adapters import AdapterStore
from serving.adapters.files import content_version
from serving.cli import main
from serving.cli.gateway_client import GatewayAdapters
from serving.config import ServingConfig
from serving.errors import AdapterIntegrityError, AdapterNotFound, Forbidden, ParityFailed
from tests.serving.cli.test_adapters import config_file
from tests.support.adapter_store import make_adapter

FAILED = {"ok": False, "frames": 64, "max_abs_diff": 0.31, "reference": "hf+peft"}
PASSED = {"ok": True, "frames": 64, "max_abs_diff": 0.004, "reference": "hf+peft"}
AGAINST_BASE = {"ok": True, "frames": 4, "max_abs_diff": None, "reference": "base-differs"}  # no reference


@pytest.fixture
def cli(s3_server, tmp_path):
    """(run, store, v1, v2): ``agent`` published twice (v2 serves) in a config of its own."""
    cfg = config_file(tmp_path, s3_server.url)
    store = AdapterStore(ServingConfig.from_file(cfg).adapters)
    store.ensure_bucket()
    run = lambda *a: CliRunner().invoke(main, ["-c", cfg, "adapters", *a])
    a, b = make_adapter(tmp_path / "a", seed=1), make_adapter(tmp_path / "b", seed=2)
    assert run("push", str(a), "agent").exit_code == 0
    assert run("push", str(b), "agent", "--force").exit_code == 0
    return run, store, content_version(a), content_version(b)


def _overwrite(store, name: str, version: str, fname: str, body: bytes) -> None:
    store.objects.put(store.versions.key(name, version, fname), body)


def test_verify_ok_and_mismatches(cli, tmp_path):
    run, store, v1, v2 = cli
    ok = run("verify", "agent")
    weights = (tmp_path / "b" / "adapter_model.safetensors").stat().st_size
    assert ok.exit_code == 0
    assert ok.output == f"agent@{v2} ok: the stored files ({weights} bytes of weights) hash to {v2}\n"
    report = json.loads(run("verify", f"agent@{v1}", "--json").stdout)
    assert report["ok"] is True and report["version"] == report["actual"] == v1

    _overwrite(store, "agent", v2, "adapter_model.safetensors", b"not the published weights")
    bad = run("verify", "agent")
    assert bad.exit_code == 2 and "Traceback" not in bad.output
    assert bad.stderr.startswith(f"error: adapter agent@{v2}: the stored files hash to ")
    assert bad.stderr.rstrip().endswith(f"not to version {v2}: they changed after publishing")
    as_json = run("verify", "agent", "--json")
    assert as_json.exit_code == 2 and json.loads(as_json.stdout)["exit_code"] == 2
    assert "changed after publishing" in json.loads(as_json.stdout)["error"]

    _overwrite(store, "agent", v1, "adapter_config.json", b'{"peft_type": "LORA", "r": 8}')
    config = run("verify", f"agent@{v1}")
    assert config.exit_code == 2 and f"not to version {v1}: they changed after publishing" in config.stderr

    for args, code, says in [(("verify", "ghost"), 4, "'ghost' not found"),
                             (("verify", f"agent@{'0' * 12}"), 4, "no version"),
                             (("verify", "agent@latest"), 2, "invalid adapter version")]:
        result = run(*args)
        assert result.exit_code == code and says in result.stderr, (args, result.output)


def test_list_and_history_show_parity(cli):
    run, store, v1, v2 = cli
    assert run("list").output.strip().split("\t")[-1] == "parity -"
    store.record_parity("agent", v2, PASSED)
    store.record_parity("agent", v1, FAILED)
    line = run("list").output.strip()
    assert line.startswith(f"agent\t{v2}\t") and line.endswith("\tparity ok 0.004")
    store.canary("agent", v1, 10, force_parity=True)  # a failed version serves only when forced
    assert run("list").output.strip().endswith(f"\tparity ok 0.004\tcanary {v1} 10% parity FAILED 0.31")
    listed = json.loads(run("list", "--json").output)[0]
    assert listed["parity"][v2]["max_abs_diff"] == 0.004 and listed["parity"][v1]["ok"] is False
    assert listed["canary"]["version"] == v1

    lines = [line.split("\t") for line in run("history", "agent").output.strip().splitlines()]
    assert [(f[0], f[2], f[3]) for f in lines] == [(v1, "canary", "10% parity FAILED 0.31"),
                                                   (v2, "push", "parity ok 0.004"), (v1, "push", "parity FAILED 0.31")]
    hist = json.loads(run("history", "agent", "--json").output)
    assert hist[1]["parity"]["ok"] is True and hist[2]["parity"]["max_abs_diff"] == 0.31


def test_not_compared_is_shown_as_such_never_ok(cli):
    run, store, v1, v2 = cli
    store.record_parity("agent", v2, AGAINST_BASE)
    assert run("list").output.strip().endswith("\tparity not compared")
    assert run("history", "agent").output.splitlines()[0].split("\t")[3] == "parity not compared"
    listed = json.loads(run("list", "--json").output)[0]
    assert listed["parity"][v2]["ok"] is None and listed["parity"][v2]["reference"] == "base-differs"
    promoted = run("promote", f"agent@{v1}")
    assert promoted.exit_code == 0  # v1 never checked
    refused = run("rollback", "agent")
    assert refused.exit_code == 4 and "Traceback" not in refused.output
    assert refused.stderr.startswith(f"error: adapter 'agent' version {v2} has parity not compared: ")
    assert "adapters.parity_without_reference is off; rollback refused" in refused.stderr
    assert store.resolve("agent").version == v1


def _refusal(store, v1: str, action: str) -> str:
    return (f"error: adapter 'agent' version {v1} failed its parity check against hf+peft at "
            f"{store.parity('agent')[v1].at}: max abs difference 0.31 over 64 frames, so it may not answer as "
            f"trained; {action} refused. Measure it again with `maze-serve adapters verify agent@{v1} --parity`, or "
            "have an admin force it with --force-parity (force_parity: true over the API)\n")


def _warning(v1: str) -> str:
    return (f"warning: agent@{v1} serves although its parity check failed (FAILED 0.31); the force is recorded in "
            "`adapters history agent`\n")


def test_promote_refuses_failed_parity_unless_forced(cli):
    run, store, v1, v2 = cli
    store.record_parity("agent", v1, FAILED)
    refused = run("promote", f"agent@{v1}")
    assert refused.exit_code == 4 and "Traceback" not in refused.output
    assert refused.stderr == _refusal(store, v1, "promote")
    assert store.resolve("agent").version == v2
    forced = run("promote", f"agent@{v1}", "--force")  # --force: the same as --force-parity
    assert forced.exit_code == 0 and forced.stdout == f"agent -> {v1}\n"
    assert forced.stderr == _warning(v1)
    assert run("promote", f"agent@{v2}").stdout == f"agent -> {v2}\n"  # never checked: not blocked


def test_canary_rollback_and_push_refuse_failed_parity_unless_forced(cli, tmp_path):
    run, store, v1, v2 = cli
    store.record_parity("agent", v1, FAILED)
    for args, action in [(("canary", f"agent@{v1}", "--weight", "100"), "canary"), (("rollback", "agent"), "rollback"),
                         (("push", str(tmp_path / "a"), "agent", "--force"), "push"),
                         (("push", str(tmp_path / "a"), "agent", "--canary", "5"), "canary")]:
        refused = run(*args)
        assert refused.exit_code == 4 and refused.stderr == _refusal(store, v1, action), (args, refused.output)
    ref = store.resolve("agent")
    assert (ref.version, ref.canary) == (v2, None) and len(store.history("agent")) == 2  # nothing moved

    canary = run("canary", f"agent@{v1}", "--weight", "100", "--force-parity")
    assert canary.exit_code == 0 and canary.stdout == f"agent -> {v2} (0%), canary {v1} (100%)\n"
    assert canary.stderr == _warning(v1)
    assert run("abort", "agent").exit_code == 0
    rollback = run("rollback", "agent", "--force-parity")
    assert rollback.exit_code == 0 and rollback.stdout == f"agent -> {v1}\n" and rollback.stderr == _warning(v1)
    assert run("push", str(tmp_path / "b"), "agent", "--force").exit_code == 0  # v2: never checked
    push = run("push", str(tmp_path / "a"), "agent", "--force", "--force-parity")
    assert push.exit_code == 0 and push.stderr == _warning(v1)
    lines = [line.split("\t") for line in run("history", "agent").output.strip().splitlines()]
    assert [(f[0], f[2], f[4:]) for f in lines[:6]] == [
        (v1, "push", ["forced past parity FAILED 0.31"]), (v2, "push", []),
        (v1, "rollback", ["forced past parity FAILED 0.31"]), (v1, "abort", []),
        (v1, "canary", ["forced past parity FAILED 0.31"]), (v2, "push", [])]
    assert json.loads(run("history", "agent", "--json").output)[0]["forced"] == "FAILED 0.31"


# -- the same through the gateway's management routes --------------------------------------------------
def _gateway(s3_server, auth: dict | None = None):
    """(client, store): ``client(key)`` is the CLI's GatewayAdapters with that API key against one real
    app over ASGI, the store behind it."""
    from serving.ingress import create_app

    data = ServingConfig.shipped("embedded").model_dump(mode="json")
    data["adapters"] = {"prefix": f"s3://checks-{uuid.uuid4().hex[:8]}/lora", "endpoint_url": s3_server.url}
    data["extensions"] = []
    if auth is not None:
        data["auth"] = auth
    cfg = ServingConfig.model_validate(data)
    store = AdapterStore(cfg.adapters)
    store.ensure_bucket()
    transport = httpx.ASGITransport(app=create_app(cfg))

    class Bridge(httpx.BaseTransport):
        def handle_request(self, request):
            async def go():
                async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as c:
                    resp = await c.send(request)
                    await resp.aread()
                    return httpx.Response(resp.status_code, headers=resp.headers, content=resp.content)
            return asyncio.run(go())

    def client(key: str | None = None) -> GatewayAdapters:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        http = httpx.Client(transport=Bridge(), base_url="http://gateway", headers=headers)
        return GatewayAdapters("http://gateway/v1", None, http=http)
    return client, store


@pytest.fixture
def gateway(s3_server):
    """The CLI's GatewayAdapters against the real app (auth off) over ASGI, and the store behind it."""
    client, store = _gateway(s3_server)
    return client(), store


def test_gateway_routes_verify_parity_and_forced_promote(gateway, tmp_path):
    client, store = gateway
    v1 = client.push(make_adapter(tmp_path / "a", seed=1), "agent").version
    v2 = client.push(make_adapter(tmp_path / "b", seed=2), "agent", force=True).version
    assert client.verify("agent").actual == v2 and client.verify("agent", v1).ok
    store.record_parity("agent", v1, FAILED)
    assert client.parity("agent")[v1].max_abs_diff == 0.31
    assert client.list()[0].parity is None  # v2 serves, never checked
    with pytest.raises(ParityFailed, match=f"version {v1} failed its parity check"):
        client.promote("agent", v1)
    ref = client.promote("agent", v1, force_parity=True)
    assert ref.version == v1 and ref.parity[v1].ok is False
    assert client.history("agent")[0].forced == "FAILED 0.31"
    _overwrite(store, "agent", v1, "adapter_model.safetensors", b"changed")
    with pytest.raises(AdapterIntegrityError, match="changed after publishing"):
        client.verify("agent")
    with pytest.raises(AdapterNotFound):
        client.parity("ghost")


PUBLISHER, ADMIN = "sk-parity-publisher-0001", "sk-parity-admin-00000001"
KEYS = {"keys": [
    {"name": "team", "role": "publisher", "models": ["maze-tiny", "maze-tiny:agent"], "secrets": [PUBLISHER]},
    {"name": "ops", "role": "admin", "models": ["*"], "secrets": [ADMIN]},
]}


def test_gateway_gates_every_move_and_only_an_admin_forces_it(s3_server, monkeypatch, tmp_path):
    import yaml

    monkeypatch.setenv("TEST_PARITY_GATE_KEYS", yaml.safe_dump(KEYS))
    client, store = _gateway(s3_server, auth={"keys_env": "TEST_PARITY_GATE_KEYS"})
    team, ops = client(PUBLISHER), client(ADMIN)
    a, b = make_adapter(tmp_path / "a", seed=1), make_adapter(tmp_path / "b", seed=2)
    v1 = team.push(a, "agent").version
    v2 = team.push(b, "agent", force=True).version
    store.record_parity("agent", v1, FAILED)

    raw = team.http.post("/v1/adapters/agent/canary", json={"version": v1, "weight": 100})
    assert raw.status_code == 409 and raw.json()["error"]["code"] == "adapter_parity_failed"
    assert f"version {v1} failed its parity check" in raw.json()["error"]["message"]
    for move in (lambda: team.rollback("agent"), lambda: team.promote("agent", v1),
                 lambda: team.push(a, "agent", force=True)):
        with pytest.raises(ParityFailed, match=f"version {v1} failed its parity check"):
            move()
    # Forcing is an admin's: a publisher that may move the name gets 403 for asking, whatever the store holds.
    for move in (lambda: team.canary("agent", v1, 100, force_parity=True),
                 lambda: team.rollback("agent", force_parity=True),
                 lambda: team.promote("agent", v1, force_parity=True),
                 lambda: team.push(a, "agent", force=True, force_parity=True)):
        with pytest.raises(Forbidden, match="key 'team' may not force-parity adapter 'agent': its role is 'publisher' "
                                            r"\(only an admin may\)"):
            move()
    assert store.resolve("agent").version == v2 and len(store.history("agent")) == 2  # nothing moved

    assert ops.canary("agent", v1, 100, force_parity=True).canary.version == v1
    assert ops.abort_canary("agent").canary is None
    assert ops.rollback("agent", force_parity=True).version == v1
    assert [(m.action, m.forced, m.by) for m in ops.history("agent")[:4]] == [
        ("rollback", "FAILED 0.31", "ops"), ("abort", None, None), ("canary", "FAILED 0.31", "ops"),
        ("push", None, None)]
