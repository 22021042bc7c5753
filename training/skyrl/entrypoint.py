"""Entrypoint of the SkyRL GRPO job on a GPU Ray cluster (the ``docker/Dockerfile.train`` image).

It cannot run here: SkyRL 0.4.0 needs Python >= 3.12, CUDA GPUs, vLLM and flash-attn, so
``skyrl`` is imported only inside :func:`main`. What it does, in SkyRL's VisGym-example shape:

1. parse its own options (reward, protocol, dataset size) and pass every other argument to
   ``SkyRLTrainConfig.from_cli_overrides`` (``maze-train render`` prints the full command);
2. write the parquet datasets named by ``data.train_data``/``data.val_data`` when they are
   missing (they live on the shared volume, so the first job creates them);
3. start Ray, then run SkyRL's trainer (``BasePPOExp``) in a Ray task off the head node, after
   registering the project's maze env with skyrl-gym there under ``maze_visgym`` and ``visgym``.

Usage (normally through ``maze-train submit``)::

    python -m training.skyrl_entrypoint --reward sft --protocol tuple \
        --env-id maze_2d/simple [--train-rows 256 --eval-rows 64] key=value ...
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

from training.skyrl.dataset import DatasetConfig, write_split
from training.skyrl.env import register_skyrl_envs
from training.skyrl.names import REWARD_MODES, VISGYM_ENV_CLASS

log = logging.getLogger(__name__)


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """Split our options from SkyRL's ``key=value`` overrides."""
    parser = argparse.ArgumentParser(prog="python -m training.skyrl_entrypoint", add_help=False)
    parser.add_argument("--reward", choices=REWARD_MODES, default="task")
    parser.add_argument("--protocol", default=None, help="tuple or keyword (default: the recipe's, else tuple)")
    parser.add_argument("--env-id", default="maze_2d/simple")
    parser.add_argument("--env-class", default=VISGYM_ENV_CLASS)
    parser.add_argument("--train-rows", type=int, default=256)
    parser.add_argument("--eval-rows", type=int, default=64)
    return parser.parse_known_args(list(argv))


def ensure_datasets(train_file: str, eval_file: str, cfg: DatasetConfig) -> list[str]:
    """Write the train/eval parquet files that are missing (local or mounted paths only).

    Returns:
        The paths written.
    """
    created = []
    for path, n, seeded in ((train_file, cfg.train_rows, False), (eval_file, cfg.eval_rows, True)):
        if path.startswith("s3://") or Path(path).exists():
            continue
        write_split(path, cfg.env_id, n, seeded=seeded, env_class=cfg.env_class)
        log.info("created dataset %s (%d rows, seeded=%s)", path, n, seeded)
        created.append(path)
    return created


def main(argv: Sequence[str] | None = None) -> None:
    """Parse, prepare datasets, start Ray and run SkyRL's trainer with the maze env."""
    import multiprocessing as mp
    import sys

    import ray
    from skyrl.train.config import SkyRLTrainConfig
    from skyrl.train.entrypoints.main_base import BasePPOExp
    from skyrl.train.utils import validate_cfg
    from skyrl.train.utils.utils import initialize_ray

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    mp.set_start_method("spawn", force=True)  # SkyRL's rule: no fork under Ray
    args, overrides = parse_args(sys.argv[1:] if argv is None else argv)
    register_skyrl_envs(reward=args.reward, protocol=args.protocol)  # fail fast on bad options
    cfg = SkyRLTrainConfig.from_cli_overrides(overrides)
    validate_cfg(cfg)
    dataset = DatasetConfig(
        env_id=args.env_id, env_class=args.env_class, train_rows=args.train_rows, eval_rows=args.eval_rows
    )
    ensure_datasets(cfg.data.train_data[0], cfg.data.val_data[0], dataset)

    @ray.remote(num_cpus=1)
    def run_trainer(cfg, reward: str, protocol: str) -> None:
        # Registration is per process: do it where the generator builds the envs.
        register_skyrl_envs(reward=reward, protocol=protocol)
        BasePPOExp(cfg).run()

    initialize_ray(cfg)
    ray.get(run_trainer.remote(cfg, args.reward, args.protocol))


if __name__ == "__main__":
    main()
