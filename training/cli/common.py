"""What every ``maze-train`` command shares: the spec argument, the job client, Ray's client logs."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import click
import yaml
from pydantic import ValidationError

from training.errors import InvalidSpec
from training.jobs import JobClient
from training.spec import TrainSpec

SPEC_ARG = click.argument("spec_path", metavar="[SPEC]", required=False, type=click.Path(exists=True, dir_okay=False))
ADDRESS = click.option("--address", envvar="RAY_ADDRESS", required=True,
                       help="Ray dashboard address (http://HOST:8265) or sagemaker_ray://CLUSTER/NAMESPACE")
DB = click.option("--db", help="evaluation store for curve points (default: MAZE_DB or the default SQLite file)")


def load_spec(spec_path: str | None) -> TrainSpec:
    """The spec in ``spec_path``, or the reference spec; a bad file is :class:`InvalidSpec` (exit code 2)."""
    try:
        return TrainSpec.from_file(spec_path) if spec_path else TrainSpec()
    except (ValidationError, yaml.YAMLError) as exc:
        raise InvalidSpec(f"invalid spec {spec_path}: {exc}") from exc


def job_client(address: str) -> JobClient:
    """A Ray Jobs client for ``address``; an unreachable cluster is ``ClusterUnavailable`` (exit code 3)."""
    return JobClient(address)


# Loggers of Ray's job client that log each file packaged or skipped (dashboard_sdk sets its own INFO level).
_RAY_CLIENT_LOGGERS = ("ray", "ray.dashboard.modules.dashboard_sdk")


@contextmanager
def quiet_ray_client() -> Iterator[None]:
    """Ray's job client logs every file it packages or skips on the ``ray`` loggers (its own
    handler, not propagated); the console shows those only with ``--verbose``."""
    if logging.getLogger().getEffectiveLevel() <= logging.INFO:
        yield
        return
    loggers = [logging.getLogger(name) for name in _RAY_CLIENT_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
