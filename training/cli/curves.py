"""``maze-train sync``: a job's step metrics (logs and dumped evals) into the evaluation store."""

from __future__ import annotations

import click

from training.checkpoints import list_steps
from training.cli.common import ADDRESS, DB, job_client
from training.metrics import StepMetrics, parse_log_lines


def record_points(db: str | None, source: str, base: str, env_id: str, points: list[StepMetrics]) -> int:
    """Add each point's metrics as curve points of ``source``; returns how many were new."""
    from evaluation.store import Store  # the store (SQLAlchemy) only for the commands that write curves

    store = Store(db)
    try:
        return sum(store.add_curve_point(source, base, env_id, p.step, k, v) for p in points for k, v in p.metrics.items())
    finally:
        store.close()


@click.command()
@ADDRESS
@click.argument("submission_id")
@click.option("--export", "export_path", help="also read dumped evals under this export path (local or s3://)")
@DB
def sync(address: str, submission_id: str, export_path: str | None, db: str | None) -> None:
    """Import a job's step metrics (logs and dumped evals) into the store as a training curve."""
    client = job_client(address)
    meta = client.info(submission_id).metadata
    points = list(parse_log_lines(client.logs(submission_id).splitlines()))
    export_path = export_path or meta.get("export_path")
    if export_path:
        points += [StepMetrics(s.step, {"eval/true_pass_at_1": s.pass_at_1}) for s in list_steps(export_path)
                   if s.pass_at_1 is not None]
    added = record_points(db, submission_id, meta.get("base", "?"), meta.get("env_id", "?"), points)
    click.echo(f"{added} new curve points from {len(points)} steps")


COMMANDS = [sync]
