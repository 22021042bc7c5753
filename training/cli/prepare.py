"""``maze-train render | spec | dataset | manifests``: what a job needs, with no cluster."""

from __future__ import annotations

import json
from pathlib import Path

import click
import yaml
from pydantic import ValidationError

from agent.cli import json_option
from training.cli.common import SPEC_ARG, load_spec
from training.errors import InvalidSpec
from training.k8s import write_manifests
from training.overrides import entrypoint_argv, render_entrypoint, to_skyrl_overrides
from training.skyrl.dataset import DEFAULT_EVAL_ROWS, DEFAULT_TRAIN_ROWS, DatasetConfig, write_datasets
from training.skyrl.names import VISGYM_ENV_CLASS


@click.command()
@SPEC_ARG
@json_option("print argv and overrides as JSON")
def render(spec_path: str | None, as_json: bool) -> None:
    """Print the job's entrypoint command with every override (the reference spec without SPEC)."""
    spec = load_spec(spec_path)
    if as_json:
        click.echo(json.dumps({"argv": entrypoint_argv(spec), "overrides": to_skyrl_overrides(spec)}, indent=2))
    else:
        click.echo(render_entrypoint(spec))


@click.command("spec")
@SPEC_ARG
def show_spec(spec_path: str | None) -> None:
    """Print a spec with every default filled in, as YAML (a starting point for your own)."""
    click.echo(yaml.safe_dump(load_spec(spec_path).model_dump(mode="json"), sort_keys=False), nl=False)


@click.command()
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="folder to write into")
@click.option("--env-id", default="maze_2d/simple", show_default=True, help="maze variant written to every row")
@click.option("--env-class", default=VISGYM_ENV_CLASS, show_default=True, help="skyrl-gym env class of the rows")
@click.option("--train-rows", default=DEFAULT_TRAIN_ROWS, show_default=True, help="unseeded training rows")
@click.option("--eval-rows", default=DEFAULT_EVAL_ROWS, show_default=True, help="evaluation rows (seed = i)")
def dataset(out_dir: str, env_id: str, env_class: str, train_rows: int, eval_rows: int) -> None:
    """Write train.parquet and eval.parquet in SkyRL's row schema."""
    try:
        cfg = DatasetConfig(env_id=env_id, env_class=env_class, train_rows=train_rows, eval_rows=eval_rows)
    except ValidationError as exc:
        raise InvalidSpec(str(exc)) from exc
    for split, path in write_datasets(out_dir, cfg).items():
        click.echo(f"{split}\t{path}")


@click.command()
@SPEC_ARG
@click.option("--out", "out_dir", default="k8s", show_default=True, type=click.Path(file_okay=False))
def manifests(spec_path: str | None, out_dir: str) -> None:
    """Write the RayCluster and FSx PV/PVC manifests for SPEC (k8s/ holds the reference's)."""
    for path in write_manifests(Path(out_dir), load_spec(spec_path)):
        click.echo(str(path))


COMMANDS = [render, show_spec, dataset, manifests]
