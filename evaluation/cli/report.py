"""``maze-eval report``: a self-contained HTML report of one run, or of a training run's served curve."""

from __future__ import annotations

import click

from evaluation.cli.common import open_store
from evaluation.errors import EvalError, UnknownRun


@click.command("report")
@click.argument("run_id", required=False)
@click.option("--curve", "source", metavar="SOURCE",
              help="instead of a run: the served curve of training run SOURCE (maze-train watch)")
@click.option("--out", "out_path", help="HTML file to write (default: RUN_ID.html or SOURCE-curve.html)")
@click.pass_obj
def report_cmd(obj: dict, run_id: str | None, source: str | None, out_path: str | None) -> None:
    """Write a self-contained HTML report of RUN_ID (grid, plots, GIF replays), or with --curve the
    served curve of a training run (both curves, the gap, the best step and how to serve it)."""
    if (run_id is None) == (source is None):
        raise EvalError("give a RUN_ID or --curve SOURCE (one of them)")
    if source is not None:
        from evaluation.curve_report import write_curve_report

        try:
            path = write_curve_report(open_store(obj), source, out_path or f"{source}-curve.html")
        except KeyError as exc:
            raise EvalError(f"no served curve for {source!r} (maze-train watch records one)") from exc
        click.echo(str(path))
        return
    from evaluation.report import write_report

    try:
        path = write_report(open_store(obj), run_id, out_path or f"{run_id}.html")
    except KeyError as exc:
        raise UnknownRun(run_id) from exc
    click.echo(str(path))


COMMANDS = [report_cmd]
