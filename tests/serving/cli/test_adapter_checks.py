"""``maze-serve adapters verify``, the parity column of ``list`` and ``history`` and ``promote --force``,
against a real local S3 server; and the same through the gateway's management routes (the real
FastAPI app, auth off, over ASGI) with the CLI's client."""

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
from serving.errors import AdapterIntegrityError, AdapterNotFound, ParityFailed
from tests.serving.cli.test_adapters import config_file
from tests.support.adapter_store import make_adapter

FAILED = {"ok": False, "frames": 64, "max_abs_diff": 0.31, "reference": "hf+peft"}
PASSED = {"ok": True, "frames": 64, "max_abs_diff": 0.004, "reference": "hf+peft"}


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
    store.canary("agent", v1, 10)
    assert run("list").output.strip().endswith(f"\tparity ok 0.004\tcanary {v1} 10% parity FAILED 0.31")
    listed = json.loads(run("list", "--json").output)[0]
    assert listed["parity"][v2]["max_abs_diff"] == 0.004 and listed["parity"][v1]["ok"] is False
    assert listed["canary"]["version"] == v1

    lines = [line.split("\t") for line in run("history", "agent").output.strip().splitlines()]
    assert [(f[0], f[2], f[3]) for f in lines] == [(v1, "canary", "10% parity FAILED 0.31"),
                                                   (v2, "push", "parity ok 0.004"), (v1, "push", "parity FAILED 0.31")]
    hist = json.loads(run("history", "agent", "--json").output)
    assert hist[1]["parity"]["ok"] is True and hist[2]["parity"]["max_abs_diff"] == 0.31


def test_promote_refuses_failed_parity_unless_forced(cli):
    run, store, v1, v2 = cli
    store.record_parity("agent", v1, FAILED)
    refused = run("promote", f"agent@{v1}")
    assert refused.exit_code == 4 and "Traceback" not in refused.output
    assert refused.stderr == (f"error: adapter 'agent' version {v1} failed its parity check against hf+peft at "
                              f"{store.parity('agent')[v1].at}: max abs difference 0.31 over 64 frames, so it may "
                              "not answer as trained. Promote it anyway with --force (force: true over the API)\n")
    assert store.resolve("agent").version == v2
    forced = run("promote", f"agent@{v1}", "--force")
    assert forced.exit_code == 0 and forced.stdout == f"agent -> {v1}\n"
    assert forced.stderr == f"warning: agent@{v1} serves although its parity check failed (FAILED 0.31)\n"
    assert run("promote", f"agent@{v2}").stdout == f"agent -> {v2}\n"  # never checked: not blocked


# -- the same through the gateway's management routes --------------------------------------------------
@pytest.fixture
def gateway(s3_server):
    """The CLI's GatewayAdapters against the real app (auth off) over ASGI, and the store behind it."""
    from serving.ingress import create_app

    data = ServingConfig.shipped("embedded").model_dump(mode="json")
    data["adapters"] = {"prefix": f"s3://checks-{uuid.uuid4().hex[:8]}/lora", "endpoint_url": s3_server.url}
    data["extensions"] = []
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

    http = httpx.Client(transport=Bridge(), base_url="http://gateway")
    return GatewayAdapters("http://gateway/v1", None, http=http), store


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
    ref = client.promote("agent", v1, force=True)
    assert ref.version == v1 and ref.parity[v1].ok is False
    _overwrite(store, "agent", v1, "adapter_model.safetensors", b"changed")
    with pytest.raises(AdapterIntegrityError, match="changed after publishing"):
        client.verify("agent")
    with pytest.raises(AdapterNotFound):
        client.parity("ghost")
