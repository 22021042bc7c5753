"""``maze-train checkpoints | publish``: a run's exported steps, and one of them into the adapter store."""

from __future__ import annotations

import json

import click

from agent.cli import json_option
from training.checkpoints import list_steps
from training.errors import PublishError
from training.publishing import publish as publish_step


@click.command()
@click.argument("export_path")
@json_option()
def checkpoints(export_path: str, as_json: bool) -> None:
    """Exported steps under EXPORT_PATH (local or s3://) with their eval pass@1."""
    steps = list_steps(export_path)
    if as_json:
        click.echo(json.dumps([s.__dict__ for s in steps], indent=2))
        return
    for s in steps:
        click.echo(f"{s.step}\t{'-' if s.pass_at_1 is None else f'{s.pass_at_1:.3f}'}\t{s.path}")


@click.command()
@click.option("--export", "export_path", required=True, help="export path of the run (local or s3://)")
@click.option("--step", type=int, required=True, help="global step to publish")
@click.option("--name", required=True, help="adapter name to publish as")
@click.option("--serving-config", default=None, help="serving config (name or YAML) whose adapter store receives it")
@click.option("--base", help="base model id (default: the serving config's first)")
@click.option("--force", is_flag=True, help="replace an existing adapter of that name")
def publish(export_path: str, step: int, name: str, serving_config: str | None, base: str | None, force: bool) -> None:
    """Push an exported step's adapter to the gateway's S3 store (validated, atomic)."""
    try:
        done = publish_step(export_path, step, name, serving_config=serving_config, base=base, force=force)
    except (FileNotFoundError, ValueError) as exc:  # the adapter store's own errors reach the boundary as they are
        raise PublishError(str(exc)) from exc
    click.echo(f"published {done.base}:{done.name} version {done.version} (step {done.step})")


COMMANDS = [checkpoints, publish]
