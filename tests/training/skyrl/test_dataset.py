"""SkyRL parquet datasets: row schema, seeds, and rows the env accepts as extras."""

from __future__ import annotations

import pandas as pd
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from agent.maze import generate_from_seed
from training.skyrl.dataset import DatasetConfig, write_datasets
from training.skyrl.env import MazeTextEnv


def test_reference_datasets(tmp_path):
    paths = write_datasets(tmp_path)
    train, evals = pd.read_parquet(paths["train"]), pd.read_parquet(paths["eval"])

    assert len(train) == 256 and list(train.columns) == ["prompt", "env_class", "visgym_env_id"]
    assert len(evals) == 64 and list(evals.columns) == ["prompt", "env_class", "visgym_env_id", "seed"]
    assert evals["seed"].tolist() == list(range(64))
    for df in (train, evals):
        assert set(df["env_class"]) == {"visgym"} and set(df["visgym_env_id"]) == {"maze_2d/simple"}
        assert [list(p) for p in df["prompt"].head(1)] == [[{"role": "user", "content": "placeholder"}]]
    schema = pq.read_schema(paths["eval"])
    assert str(schema.field("prompt").type) == "list<element: struct<role: string, content: string>>"


@pytest.mark.parametrize("env_id", ["maze_2d/easy", "maze_2d/hard"])
def test_any_env_id_and_rows_feed_the_env(tmp_path, env_id):
    cfg = DatasetConfig(env_id=env_id, env_class="maze_visgym", train_rows=3, eval_rows=5)
    paths = write_datasets(tmp_path / "d", cfg)
    evals = pd.read_parquet(paths["eval"])
    assert len(pd.read_parquet(paths["train"])) == 3 and len(evals) == 5
    size = {"maze_2d/easy": 9, "maze_2d/hard": 11}[env_id]
    # SkyRL passes a row's non-prompt columns as extras (plus max_turns).
    row = evals.iloc[4].drop(["prompt", "env_class"]).to_dict()
    env = MazeTextEnv(extras={**row, "max_turns": 7})
    env.init([])
    expected = generate_from_seed(size, size, 4)
    assert env.seed == 4 and env.max_turns == 7
    assert (env.env.grid == expected.grid).all() and env.env.agent == expected.start


def test_no_eval_rows_and_bad_env(tmp_path):
    assert set(write_datasets(tmp_path, DatasetConfig(train_rows=1, eval_rows=0))) == {"train"}
    with pytest.raises(ValidationError, match="unknown env id"):
        DatasetConfig(env_id="counting/easy")
