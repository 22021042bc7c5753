"""maze-train publish: an exported step into the adapter store of a serving config (a moto server over HTTP)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from serving.adapters import AdapterStore, s3_env
from serving.config import ServingConfig
from serving.local import free_port
from training import publish
from training.cli import main

MODELS = Path(__file__).resolve().parents[2] / "models"


@pytest.fixture(scope="module")
def serving_config(tmp_path_factory):
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port())
    server.start()
    d = ServingConfig.shipped("embedded").model_dump(mode="json")
    d["adapters"]["endpoint_url"] = f"http://127.0.0.1:{server._port}"
    path = tmp_path_factory.mktemp("serving") / "serving.yaml"
    path.write_text(yaml.safe_dump(d))
    cfg = ServingConfig.from_file(path)
    with pytest.MonkeyPatch.context() as mp:  # the S3 environment for this module only
        for key, value in s3_env(cfg).items():
            mp.setenv(key, value)
        AdapterStore(cfg.adapters).ensure_bucket()
        yield str(path)
    server.stop()


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    """A run's export path with step 5 holding the shipped adapter."""
    root = tmp_path_factory.mktemp("export")
    shutil.copytree(MODELS / "maze-grpo", root / "global_step_5" / "policy")
    return root


def test_publish_pushes_the_step_as_a_new_adapter_version(serving_config, export):
    done = publish(str(export), 5, "from-step-5", serving_config=serving_config)
    cfg = ServingConfig.from_file(serving_config)
    assert (done.base, done.name, done.step) == (cfg.base_models[0].id, "from-step-5", 5)
    assert AdapterStore(cfg.adapters).resolve("from-step-5").version == done.version


def test_publish_cli_prints_the_version_and_maps_bad_input_to_exit_2(serving_config, export):
    ok = CliRunner().invoke(main, ["publish", "--export", str(export), "--step", "5", "--name", "cli-5",
                                   "--serving-config", serving_config])
    assert ok.exit_code == 0 and "published" in ok.output and "(step 5)" in ok.output, ok.output
    missing = CliRunner().invoke(main, ["publish", "--export", str(export), "--step", "6", "--name", "x",
                                        "--serving-config", serving_config])
    assert missing.exit_code == 2 and "no exported step 6" in missing.output
    base = CliRunner().invoke(main, ["publish", "--export", str(export), "--step", "5", "--name", "x",
                                     "--serving-config", serving_config, "--base", "nope"])
    assert base.exit_code == 2 and "unknown base 'nope'" in base.output


def test_the_same_store_error_exits_the_same_from_maze_train_and_maze_serve(serving_config, export):
    """An adapter name already published: AdapterExists exits 4 from both tools."""
    from serving.cli import main as maze_serve
    from tests.support.adapter_store import make_adapter

    other = make_adapter(export / "global_step_7" / "policy", seed=7)  # other weights than step 5's
    first = CliRunner().invoke(main, ["publish", "--export", str(export), "--step", "5", "--name", "taken",
                                      "--serving-config", serving_config])
    assert first.exit_code == 0, first.output
    train = CliRunner().invoke(main, ["publish", "--export", str(export), "--step", "7", "--name", "taken",
                                      "--serving-config", serving_config])
    serve = CliRunner().invoke(maze_serve, ["-c", serving_config, "adapters", "push", str(other), "taken"])
    assert (train.exit_code, serve.exit_code) == (4, 4), (train.output, serve.output)
    assert "exists" in train.output and "exists" in serve.output


def test_an_unreachable_store_exits_3(tmp_path, export):
    d = ServingConfig.shipped("embedded").model_dump(mode="json")
    d["adapters"]["endpoint_url"] = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    path = tmp_path / "down.yaml"
    path.write_text(yaml.safe_dump(d))
    out = CliRunner().invoke(main, ["publish", "--export", str(export), "--step", "5", "--name", "x",
                                    "--serving-config", str(path)])
    assert out.exit_code == 3 and "error:" in out.output, out.output


def test_an_export_in_s3_lists_fetches_and_publishes_through_the_store_door(serving_config, export, tmp_path):
    """The s3:// branch of training.checkpoints: steps listed with their eval pass@1, a step's files
    fetched byte for byte, published, and a missing file named."""
    from serving.adapters import open_objects, spec_from_env
    from training import fetch_step, list_steps

    objects = open_objects(spec_from_env("s3://maze-exports/runs/r1/exports"))
    objects.ensure_bucket()
    for path in export.rglob("*"):
        if path.is_file():
            objects.put(path.relative_to(export).as_posix(), path.read_bytes())
    objects.put("dumped_evals/global_step_5_evals/aggregated_results.jsonl", b'{"eval/all/pass_at_1": 0.5}\n')
    url = "s3://maze-exports/runs/r1/exports"
    steps = {s.step: s for s in list_steps(url)}
    assert {s.step for s in list_steps(str(export))} == set(steps)  # the same steps as on disk
    assert (steps[5].path, steps[5].pass_at_1) == (f"{url}/global_step_5/policy", 0.5)
    folder = fetch_step(url, 5, tmp_path / "fetched")
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        assert (folder / name).read_bytes() == (MODELS / "maze-grpo" / name).read_bytes()
    assert not list(folder.glob("*.part"))
    done = publish(url, 5, "from-s3", serving_config=serving_config)
    assert done.version == AdapterStore(ServingConfig.from_file(serving_config).adapters).resolve("from-s3").version
    objects.put("global_step_9/policy/adapter_config.json", b"{}")
    with pytest.raises(FileNotFoundError, match="global_step_9/policy/adapter_model.safetensors is missing"):
        fetch_step(url, 9, tmp_path / "broken")
