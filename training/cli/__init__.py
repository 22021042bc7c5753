"""``maze-train``: render, prepare, launch and follow GRPO jobs from one training spec.

One module per command group: :mod:`~training.cli.prepare` (render, spec, dataset, manifests; no
cluster), :mod:`~training.cli.jobs` (submit, status, list, stop, logs), :mod:`~training.cli.curves`
(sync), :mod:`~training.cli.publish` (checkpoints, publish) and :mod:`~training.cli.watch` (watch:
every exported step published, served and scored). Exit codes (agent.cli.boundary's table): 0
done, 1 failed (or a watch's scoring run incomplete), 2 bad input (spec, options, unknown job,
missing file, no permission), 3 cluster, S3 or results database unavailable, 4 adapter not found or
already published, 130 interrupted. Every failure is one line on stderr; ``--verbose`` adds the
traceback.
"""

from __future__ import annotations

import logging

import click
import yaml
from pydantic import ValidationError

from agent.cli import EXIT_BAD_INPUT, EXIT_UNAVAILABLE, boundary_group
from training.cli import curves, jobs, prepare, publish, watch


def _error_of(exc: BaseException) -> tuple[int, str] | None:
    """maze-train's expected failures besides the project's own errors (which the boundary maps the
    same for every tool): bad spec files, S3 and the results database."""
    if isinstance(exc, (ValidationError, yaml.YAMLError)):
        return EXIT_BAD_INPUT, f"invalid input: {exc}"
    if type(exc).__module__.startswith(("botocore", "boto3", "s3transfer")):
        return EXIT_UNAVAILABLE, f"S3 unavailable: {exc}"
    if type(exc).__module__.startswith("sqlalchemy"):
        from evaluation.errors import database_failure  # the store's failures, mapped as maze-eval maps them

        return database_failure(exc)
    return None


@click.group(cls=boundary_group(_error_of), context_settings={"auto_envvar_prefix": "MAZE_TRAIN", "help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="log progress to stderr")
def main(verbose: bool) -> None:
    """Train maze agents with SkyRL GRPO on a Ray cluster, from one typed spec."""
    level = logging.INFO if verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


for _group in (prepare, jobs, curves, publish, watch):
    for _command in _group.COMMANDS:
        main.add_command(_command)

