"""What every ``maze-train`` command shares: exit codes, the spec argument, error exits."""

from __future__ import annotations

import sys
from typing import NoReturn

import click
import yaml
from pydantic import ValidationError

from training.jobs import JobClient, JobError
from training.spec import TrainSpec

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_UNAVAILABLE = 0, 1, 2, 3

SPEC_ARG = click.argument("spec_path", metavar="[SPEC]", required=False, type=click.Path(exists=True, dir_okay=False))
ADDRESS = click.option("--address", envvar="RAY_ADDRESS", required=True,
                       help="Ray dashboard address (http://HOST:8265) or sagemaker_ray://CLUSTER/NAMESPACE")
DB = click.option("--db", help="evaluation store for curve points (default: MAZE_DB or the default SQLite file)")


def load_spec(spec_path: str | None) -> TrainSpec:
    """The spec in ``spec_path``, or the reference spec; a bad file exits with code 2."""
    try:
        return TrainSpec.from_file(spec_path) if spec_path else TrainSpec()
    except (ValidationError, yaml.YAMLError) as exc:
        click.echo(f"error: invalid spec {spec_path}: {' '.join(str(exc).split())}", err=True)
        sys.exit(EXIT_BAD_INPUT)


def fail(exc: Exception, code: int = EXIT_FAILED) -> NoReturn:
    """Print ``exc`` and exit with ``code`` (with the default, the error's own ``exit_code`` if it has one)."""
    click.echo(f"error: {exc}", err=True)
    sys.exit(getattr(exc, "exit_code", code) if code == EXIT_FAILED else code)


def job_client(address: str) -> JobClient:
    """A Ray Jobs client for ``address``; an unreachable cluster exits with code 3."""
    try:
        return JobClient(address)
    except JobError as exc:
        fail(exc, EXIT_UNAVAILABLE)
