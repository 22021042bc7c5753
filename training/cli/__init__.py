"""``maze-train``: render, prepare, launch and follow GRPO jobs from one training spec.

One module per command group: :mod:`~training.cli.prepare` (render, spec, dataset, manifests; no
cluster), :mod:`~training.cli.jobs` (submit, status, list, stop, logs), :mod:`~training.cli.curves`
(sync), :mod:`~training.cli.publish` (checkpoints, publish) and :mod:`~training.cli.watch` (watch:
every exported step published, served and scored). Exit codes: 0 done, 1 failed,
2 bad input (spec, options, unknown job, missing file, no permission), 3 cluster or store
unavailable, 130 interrupted. Every failure is one line on stderr; ``--verbose`` adds the traceback.
"""

from __future__ import annotations

import logging

import click
import yaml
from pydantic import ValidationError

from agent.cli_boundary import boundary_group
from training.cli import curves, jobs, prepare, publish, watch
from training.cli.common import EXIT_BAD_INPUT, EXIT_UNAVAILABLE
from training.errors import TrainingError


def _error_of(exc: BaseException) -> tuple[int, str] | None:
    """maze-train's expected failures, mapped once where the CLI starts (codes in the module docstring)."""
    if isinstance(exc, TrainingError):
        return exc.exit_code, str(exc)
    if isinstance(exc, (ValidationError, yaml.YAMLError)):
        return EXIT_BAD_INPUT, f"invalid input: {exc}"
    module = type(exc).__module__
    if module.startswith(("botocore", "boto3", "s3transfer")):
        return EXIT_UNAVAILABLE, f"S3 unavailable: {exc}"
    if module.startswith("sqlalchemy"):
        return EXIT_UNAVAILABLE, f"results database unavailable: {getattr(exc, 'orig', None) or exc}"
    if module.startswith("evaluation") and hasattr(exc, "exit_code"):  # watch: scoring's own errors (EvalError)
        return exc.exit_code, str(exc)
    if module.startswith("serving"):  # publish: the adapter store's own errors carry their status
        return (EXIT_UNAVAILABLE if getattr(exc, "status_code", 0) == 503 else EXIT_BAD_INPUT), str(exc)
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

