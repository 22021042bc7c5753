"""``maze-train``: render, prepare, launch and follow GRPO jobs from one training spec.

``render``, ``spec``, ``dataset`` and ``manifests`` need no cluster; ``submit``, ``status``,
``logs``, ``stop``, ``list``, ``sync``, ``checkpoints`` and ``publish`` are in
``training.cli_jobs``. Exit codes: 0 done, 1 failed (or an unexpected error), 2 bad input (spec,
options, unknown job, missing file, no permission), 3 cluster or store unavailable, 130
interrupted. Every failure is one line on stderr; ``--verbose`` adds the traceback.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import click
import yaml
from pydantic import ValidationError

from agent.cli_boundary import boundary_group
from training.cli_jobs import register as register_cluster_commands
from training.dataset import DEFAULT_EVAL_ROWS, DEFAULT_TRAIN_ROWS, DatasetConfig, write_datasets
from training.k8s import write_manifests
from training.overrides import entrypoint_argv, render_entrypoint, to_skyrl_overrides
from training.skyrl_names import VISGYM_ENV_CLASS
from training.spec import TrainSpec

EXIT_OK, EXIT_BAD_INPUT = 0, 2
SPEC_ARG = click.argument("spec_path", metavar="[SPEC]", required=False, type=click.Path(exists=True, dir_okay=False))


def _load_spec(spec_path: str | None) -> TrainSpec:
    """The spec in ``spec_path``, or the reference spec; a bad file exits with code 2."""
    try:
        return TrainSpec.from_file(spec_path) if spec_path else TrainSpec()
    except (ValidationError, yaml.YAMLError) as exc:
        click.echo(f"error: invalid spec {spec_path}: {' '.join(str(exc).split())}", err=True)
        sys.exit(EXIT_BAD_INPUT)


def _error_of(exc: BaseException) -> tuple[int, str] | None:
    """maze-train's expected failures, mapped once where the CLI starts (codes in the module docstring)."""
    from training.jobs import JobError

    if isinstance(exc, JobError):
        return (3 if "cannot reach" in str(exc) else 2), str(exc)
    if isinstance(exc, (ValidationError, yaml.YAMLError)):
        return EXIT_BAD_INPUT, f"invalid input: {exc}"
    module = type(exc).__module__
    if module.startswith(("botocore", "boto3", "s3transfer")):
        return 3, f"S3 unavailable: {exc}"
    if module.startswith("sqlalchemy"):
        return 3, f"results database unavailable: {getattr(exc, 'orig', None) or exc}"
    if module.startswith("serving"):  # publish: the adapter store's own errors carry their status
        return (3 if getattr(exc, "status_code", 0) == 503 else EXIT_BAD_INPUT), str(exc)
    return None


@click.group(cls=boundary_group(_error_of),
             context_settings={"auto_envvar_prefix": "MAZE_TRAIN", "help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="log progress to stderr")
def main(verbose: bool) -> None:
    """Train maze agents with SkyRL GRPO on a Ray cluster, from one typed spec."""
    level = logging.INFO if verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


@main.command()
@SPEC_ARG
@click.option("--json", "as_json", is_flag=True, help="print argv and overrides as JSON")
def render(spec_path: str | None, as_json: bool) -> None:
    """Print the job's entrypoint command with every override (the reference spec without SPEC)."""
    spec = _load_spec(spec_path)
    if as_json:
        click.echo(json.dumps({"argv": entrypoint_argv(spec), "overrides": to_skyrl_overrides(spec)}, indent=2))
    else:
        click.echo(render_entrypoint(spec))


@main.command("spec")
@SPEC_ARG
def show_spec(spec_path: str | None) -> None:
    """Print a spec with every default filled in, as YAML (a starting point for your own)."""
    click.echo(yaml.safe_dump(_load_spec(spec_path).model_dump(mode="json"), sort_keys=False), nl=False)


@main.command()
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
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    for split, path in write_datasets(out_dir, cfg).items():
        click.echo(f"{split}\t{path}")


@main.command()
@SPEC_ARG
@click.option("--out", "out_dir", default="k8s", show_default=True, type=click.Path(file_okay=False))
def manifests(spec_path: str | None, out_dir: str) -> None:
    """Write the RayCluster and FSx PV/PVC manifests for SPEC (k8s/ holds the reference's)."""
    for path in write_manifests(Path(out_dir), _load_spec(spec_path)):
        click.echo(str(path))


# Cluster, store and adapter commands live in their own module (submit, status, logs, ...).
register_cluster_commands(main, _load_spec)


if __name__ == "__main__":
    main()
