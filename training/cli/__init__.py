"""``maze-train``: render, prepare, launch and follow GRPO jobs from one training spec.

One module per command group: :mod:`~training.cli.prepare` (render, spec, dataset, manifests; no
cluster), :mod:`~training.cli.jobs` (submit, status, list, stop, logs), :mod:`~training.cli.curves`
(sync) and :mod:`~training.cli.publish` (checkpoints, publish). Exit codes: 0 done, 1 failed,
2 bad input, 3 cluster or store unavailable.
"""

from __future__ import annotations

import logging

import click

from training.cli import curves, jobs, prepare, publish


@click.group(context_settings={"auto_envvar_prefix": "MAZE_TRAIN", "help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="log progress to stderr")
def main(verbose: bool) -> None:
    """Train maze agents with SkyRL GRPO on a Ray cluster, from one typed spec."""
    level = logging.INFO if verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


for _group in (prepare, jobs, curves, publish):
    for _command in _group.COMMANDS:
        main.add_command(_command)

