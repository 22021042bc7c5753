"""SkyRL datasets for the maze: parquet "tickets" naming the env, one row per episode.

The env builds its own multimodal prompt, so a row only says which environment to run:
``{prompt: [{role: user, content: "placeholder"}], env_class, visgym_env_id[, seed]}`` (SkyRL's
VisGym row schema). Training rows carry no seed (a random maze each time); evaluation rows carry
``seed = i``, the project's fixed evaluation set.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field

from agent.env import DEFAULT_ENV_ID
from agent.runner import EnvId
from training.skyrl.names import VISGYM_ENV_CLASS

log = logging.getLogger(__name__)

TRAIN_FILE = "train.parquet"
EVAL_FILE = "eval.parquet"
PLACEHOLDER_PROMPT = [{"role": "user", "content": "placeholder"}]
DEFAULT_TRAIN_ROWS = 256
DEFAULT_EVAL_ROWS = 64

_MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])


class DatasetConfig(BaseModel):
    """What ``maze-train dataset`` writes."""

    model_config = ConfigDict(extra="forbid")

    env_id: EnvId = Field(DEFAULT_ENV_ID, description="maze variant id written to every row (visgym_env_id)")
    env_class: str = Field(VISGYM_ENV_CLASS, description="skyrl-gym env class written to every row")
    train_rows: int = Field(DEFAULT_TRAIN_ROWS, ge=1, description="unseeded training rows")
    eval_rows: int = Field(DEFAULT_EVAL_ROWS, ge=0, description="evaluation rows, with seed = 0..eval_rows-1")


def make_rows(env_id: str, n: int, *, seeded: bool, env_class: str = VISGYM_ENV_CLASS) -> list[dict]:
    """``n`` rows in SkyRL's schema; with ``seeded`` each row ``i`` gets ``seed = i``."""
    rows = []
    for i in range(n):
        row = {"prompt": [dict(m) for m in PLACEHOLDER_PROMPT], "env_class": env_class, "visgym_env_id": env_id}
        if seeded:
            row["seed"] = i
        rows.append(row)
    return rows


def _table(rows: list[dict], *, seeded: bool) -> pa.Table:
    fields = [("prompt", pa.list_(_MESSAGE)), ("env_class", pa.string()), ("visgym_env_id", pa.string())]
    if seeded:
        fields.append(("seed", pa.int64()))
    return pa.Table.from_pylist(rows, schema=pa.schema(fields))


def write_split(path: str | Path, env_id: str, n: int, *, seeded: bool, env_class: str = VISGYM_ENV_CLASS) -> Path:
    """Write one parquet file of ``n`` rows (see :func:`make_rows`); returns its path."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(_table(make_rows(env_id, n, seeded=seeded, env_class=env_class), seeded=seeded), path)
    return path


def write_datasets(out_dir: str | Path, cfg: DatasetConfig | None = None) -> dict[str, Path]:
    """Write ``train.parquet`` (unseeded) and ``eval.parquet`` (seeded) under ``out_dir``.

    Args:
        out_dir: folder to write into (created if missing); local or a mounted shared FS.
        cfg: variant, env class and row counts (defaults: maze_2d/simple, 256 + 64 rows).

    Returns:
        ``{"train": path, "eval": path}`` (``eval`` only when ``cfg.eval_rows > 0``).
    """
    cfg = cfg or DatasetConfig()
    out = Path(out_dir).expanduser()
    cls = cfg.env_class
    written = {"train": write_split(out / TRAIN_FILE, cfg.env_id, cfg.train_rows, seeded=False, env_class=cls)}
    if cfg.eval_rows:
        written["eval"] = write_split(out / EVAL_FILE, cfg.env_id, cfg.eval_rows, seeded=True, env_class=cls)
    log.info("wrote %s dataset for %s: %s", cfg.env_class, cfg.env_id, {k: str(v) for k, v in written.items()})
    return written
