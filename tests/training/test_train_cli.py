"""``maze-train`` commands that need no cluster, run in-process with click's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from click.testing import CliRunner

from training.cli import main
from training.k8s import render_manifests
from training.overrides import to_skyrl_overrides
from training.spec import TrainSpec

GOLDEN = Path(__file__).parent / "golden" / "reference_entrypoint.txt"
K8S = Path(__file__).resolve().parents[2] / "k8s"


def _run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_render_reference_and_a_spec_file(tmp_path):
    result = _run("render")
    assert result.exit_code == 0 and result.output == GOLDEN.read_text()

    spec = tmp_path / "tiny.yaml"
    spec.write_text("name: tiny\noptim: {lr: 1.0e-5}\n")
    result = _run("render", "--json", str(spec))
    data = json.loads(result.output)
    assert "trainer.policy.optimizer_config.lr=1e-05" in data["overrides"]
    assert data["overrides"] == to_skyrl_overrides(TrainSpec.from_file(spec))
    assert data["argv"][:3] == ["python", "-m", "training.skyrl_entrypoint"]


def test_bad_spec_exits_2(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("optim: {learning_rate: 1}\n")
    result = _run("render", str(spec))
    assert result.exit_code == 2 and "learning_rate" in result.output


def test_spec_command_round_trips(tmp_path):
    out = tmp_path / "spec.yaml"
    out.write_text(_run("spec").output)
    assert TrainSpec.from_file(out) == TrainSpec()


def test_dataset_command(tmp_path):
    args = ["--env-id", "maze_2d/hard", "--train-rows", "5", "--eval-rows", "3"]
    result = _run("dataset", "--out", str(tmp_path), *args)
    assert result.exit_code == 0
    assert pd.read_parquet(tmp_path / "eval.parquet")["seed"].tolist() == [0, 1, 2]
    assert set(pd.read_parquet(tmp_path / "train.parquet")["visgym_env_id"]) == {"maze_2d/hard"}
    assert _run("dataset", "--out", str(tmp_path), "--env-id", "nope/x").exit_code == 2


def test_manifests_command_writes_the_checked_in_files(tmp_path):
    assert _run("manifests", "--out", str(tmp_path)).exit_code == 0
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == sorted(render_manifests())  # k8s/ also holds serving's manifests
    for name in written:
        assert (tmp_path / name).read_text() == (K8S / name).read_text()


def test_example_spec_is_a_valid_local_run():
    """The walk-through spec (docs/lifecycle.md) loads and maps onto the local trainer: 9 steps, the
    starting adapter and every third step exported, the served 64 mazes held out of training."""
    from training import TrainSpec
    from training.local_job import to_grpo_config
    from training.tiny.trainers import GRPOConfig

    spec = TrainSpec.from_file(Path(__file__).resolve().parents[2] / "training/examples/tiny-local.yaml")
    cfg = GRPOConfig(**to_grpo_config(spec, "cpu"))
    assert cfg.max_steps == 9 and cfg.hf_save_interval == 3 and cfg.eval_before_train
    assert cfg.model_path == "models/maze-tiny" and cfg.held_out_seeds == 64
