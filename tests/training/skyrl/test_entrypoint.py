"""The GPU job's entrypoint: what can run here (argument split, dataset creation, lazy imports)."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd

from training.overrides import entrypoint_argv, to_skyrl_overrides
from training.skyrl.dataset import DatasetConfig
from training.skyrl.entrypoint import ensure_datasets, parse_args
from training.spec import TrainSpec


def test_rendered_argv_splits_into_our_options_and_skyrl_overrides():
    spec = TrainSpec.model_validate({"env": {"reward": "task", "env_id": "maze_2d/easy"}, "data": {"eval_rows": 8}})
    args, overrides = parse_args(entrypoint_argv(spec)[3:])
    assert (args.reward, args.protocol, args.env_id, args.env_class) == ("task", "tuple", "maze_2d/easy", "visgym")
    assert (args.train_rows, args.eval_rows) == (256, 8)
    assert overrides == to_skyrl_overrides(spec)


def test_missing_datasets_are_created_and_existing_ones_kept(tmp_path):
    train, evals = tmp_path / "d" / "train.parquet", tmp_path / "d" / "eval.parquet"
    cfg = DatasetConfig(train_rows=4, eval_rows=2)
    assert ensure_datasets(str(train), str(evals), cfg) == [str(train), str(evals)]
    assert len(pd.read_parquet(train)) == 4 and pd.read_parquet(evals)["seed"].tolist() == [0, 1]
    assert ensure_datasets(str(train), str(evals), DatasetConfig(train_rows=9)) == []
    assert len(pd.read_parquet(train)) == 4
    assert ensure_datasets("s3://bucket/train.parquet", "s3://bucket/eval.parquet", cfg) == []


def test_importing_the_entrypoint_does_not_need_skyrl():
    code = "import sys, training.skyrl.entrypoint; assert 'skyrl' not in sys.modules and 'ray' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
