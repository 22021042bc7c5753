"""maze-serve adapters/render commands against a real local S3 server."""

from __future__ import annotations

import json
import uuid

import yaml
from click.testing import CliRunner

from serving.cli import main

from tests.support.adapter_store import make_adapter


def config_file(tmp_path, s3_url: str) -> str:
    from serving.config import ServingConfig

    data = ServingConfig.shipped("embedded").model_dump(mode="json")
    data["adapters"] = {"prefix": f"s3://cli-{uuid.uuid4().hex[:8]}/lora-adapters", "endpoint_url": s3_url}
    path = tmp_path / "serving.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_push_list_rm_with_exit_codes(s3_server, tmp_path):
    cfg = config_file(tmp_path, s3_server.url)
    from serving.adapters import AdapterStore
    from serving.config import ServingConfig

    AdapterStore(ServingConfig.from_file(cfg).adapters).ensure_bucket()
    run = lambda *a: CliRunner().invoke(main, ["-c", cfg, *a])
    ok = run("adapters", "push", str(make_adapter(tmp_path / "a")), "maze-grpo")
    assert ok.exit_code == 0 and "published maze-tiny:maze-grpo version" in ok.output
    assert run("adapters", "push", str(make_adapter(tmp_path / "b", seed=3)), "maze-grpo").exit_code == 4
    assert run("adapters", "push", str(make_adapter(tmp_path / "c", rank=128)), "big").exit_code == 2
    assert run("adapters", "push", str(tmp_path / "a"), "bad/name").exit_code == 2
    listed = run("adapters", "list", "--json")
    assert listed.exit_code == 0 and '"name": "maze-grpo"' in listed.output
    assert run("adapters", "rm", "maze-grpo").exit_code == 0
    assert run("adapters", "rm", "maze-grpo").exit_code == 4


def test_store_down_exit_code(tmp_path):
    cfg = config_file(tmp_path, "http://127.0.0.1:9")
    result = CliRunner().invoke(main, ["-c", cfg, "adapters", "list"])
    assert result.exit_code == 3 and "unreachable" in result.output


def test_render_production():
    result = CliRunner().invoke(main, ["-c", "production", "render"])
    assert result.exit_code == 0 and "kind: RayService" in result.output
    assert CliRunner().invoke(main, ["-c", "nope", "render"]).exit_code == 2
    # Without -c it renders the cluster config (the embedded default is not one), and says why
    # when asked for the embedded one.
    assert CliRunner().invoke(main, ["render"]).output == result.output
    refused = CliRunner().invoke(main, ["-c", "embedded", "render"])
    assert refused.exit_code == 2 and "ingress 'direct'" in refused.output


def test_promote_rollback_history(s3_server, tmp_path):
    cfg = config_file(tmp_path, s3_server.url)
    from serving.adapters import AdapterStore
    from serving.adapters.files import content_version
    from serving.config import ServingConfig

    AdapterStore(ServingConfig.from_file(cfg).adapters).ensure_bucket()
    run = lambda *a: CliRunner().invoke(main, ["-c", cfg, *a])
    a, b = make_adapter(tmp_path / "a", seed=1), make_adapter(tmp_path / "b", seed=2)
    v1, v2 = content_version(a), content_version(b)
    assert run("adapters", "rollback", "agent").exit_code == 4  # not published
    assert run("adapters", "push", str(a), "agent").exit_code == 0
    solo = run("adapters", "rollback", "agent")
    assert solo.exit_code == 4 and "nothing to roll back to" in solo.output and "Traceback" not in solo.output
    assert run("adapters", "push", str(b), "agent", "--force").exit_code == 0

    promoted = run("adapters", "promote", f"agent@{v1}")
    assert promoted.exit_code == 0 and promoted.output.strip() == f"agent -> {v1}"
    hist = run("adapters", "history", "agent")
    assert hist.exit_code == 0
    assert [line.split("\t")[::2] for line in hist.output.strip().splitlines()] == [
        [v1, "promote"], [v2, "push"], [v1, "push"]]
    back = run("adapters", "rollback", "agent")
    assert back.exit_code == 0 and back.output.strip() == f"agent -> {v2}"
    as_json = json.loads(run("adapters", "history", "agent", "--json").output)
    assert as_json[0]["version"] == v2 and as_json[0]["action"] == "rollback" and as_json[0]["at"]
    assert f"agent\t{v2}" in run("adapters", "list").output

    for args, code, says in [
        (("promote", "agent"), 4, "runs no canary"),  # NAME alone promotes a canary
        (("promote", "agent@latest"), 2, "invalid adapter version"),
        (("promote", f"agent@{'0' * 12}"), 4, "no version"),
        (("promote", f"ghost@{v1}"), 4, "'ghost' not found"),
        (("history", "ghost"), 4, "not found"),
        (("history", "bad/name"), 2, "invalid adapter name"),
    ]:
        result = run("adapters", *args)
        assert result.exit_code == code, (args, result.output)
        assert says in result.output and result.output.startswith("error: ") and "Traceback" not in result.output
