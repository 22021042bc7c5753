"""``maze-train watch JOB --adapter NAME``: every exported step published, served and scored (a served curve)."""

from __future__ import annotations

import asyncio

import click

from training.cli.common import DB, job_client
from training.errors import InvalidSpec, TrainingError
from training.watch import DEFAULT_SEEDS, WatchConfig, Watcher


@click.command()
@click.argument("submission_id", metavar="JOB")
@click.option("--adapter", required=True, help="adapter name to publish every step under (a new version each)")
@click.option("--address", envvar="RAY_ADDRESS",
              help="Ray dashboard address of the job's cluster; without it, --export is required and one pass is made")
@click.option("--export", "export_path", help="the run's export path (default: the job's, from its metadata)")
@click.option("--serving-config", help="serving config (name or YAML) whose adapter store receives the steps "
                                       "(default: the embedded one)")
@click.option("--base", help="base model id (default: the serving config's first)")
@click.option("--endpoint", help="the gateway serving that store (default: the embedded gateway, started if needed)")
@click.option("--api-key", envvar="MAZE_API_KEY", default="EMPTY", show_default=True, help="bearer token for the endpoint")
@click.option("--env", "env_id", help="maze variant to score (default: the job's)")
@click.option("--seeds", default=DEFAULT_SEEDS, show_default=True,
              help="maze seeds scored per step: the fixed 64-maze set; fewer only for a quick, noisier curve")
@click.option("--concurrency", default=8, show_default=True, help="episodes at once")
@DB
@click.option("--ledger", help="file recording the published versions (default: under ~/.local/share/maze-gateway/watch)")
@click.option("--interval", default=30.0, show_default=True, help="seconds between looks at the export path")
@click.option("--once", is_flag=True, help="one pass over the steps exported now, then exit")
@click.option("--parity/--no-parity", default=True, show_default=True,
              help="before scoring a step, check that the gateway serves it as trained (HF + peft on its files); "
                   "a step that fails is not scored")
@click.option("--gate", is_flag=True,
              help="publish each step as a candidate and move ADAPTER only when the offline gate finds it better than "
                   "the version served (`maze-eval gate`; the serving config's adapters.gate policy); the served "
                   "curve marks each decision")
def watch(submission_id: str, adapter: str, address: str | None, export_path: str | None, env_id: str | None,
          interval: float, once: bool, **opts) -> None:
    """Publish, serve and score every step JOB exports, until the job ends (a served curve).

    Each new step becomes a version of ADAPTER, has its served parity checked (recorded with the
    version: `maze-serve adapters history ADAPTER`), is scored through the gateway pinned to that version
    and recorded next to the trainer's own pass@1: `maze-eval leaderboard --curves`, `maze-eval report
    --curve JOB`. With --gate the alias moves only on a gate pass, never to a step merely because it is
    newer. Killed and restarted, it goes on where it stopped. Exit 0 when every exported step is scored
    (and gated), 1 when some scoring runs or gates stayed incomplete (run it again to resume them).
    """
    client = job_client(address) if address else None
    meta = client.info(submission_id).metadata if client else {}
    export_path = export_path or meta.get("export_path")
    if not export_path:
        raise InvalidSpec(f"no export path: job {submission_id!r} has none in its metadata; pass --export"
                          if client else "without --address, --export is required")
    cfg = WatchConfig(source=submission_id, export_path=export_path, adapter=adapter,
                      env_id=env_id or meta.get("env_id"), **opts)
    # Ledger, file and scoring (evaluation) failures leave through maze-train's boundary.
    watcher = Watcher(cfg, on_event=click.echo)
    job_status = None if once or client is None else (lambda: client.info(submission_id).status)
    summary = asyncio.run(watcher.watch(job_status, interval))
    _print_best(cfg)
    if summary.job_status:
        click.echo(f"job {submission_id} {summary.job_status}")
    if summary.incomplete:
        raise TrainingError(f"steps {summary.incomplete} not fully scored or gated (errored episodes); run watch "
                            "again to resume them")


def _print_best(cfg: WatchConfig) -> None:
    from evaluation.served import served_curves
    from evaluation.store import Store

    store = Store(cfg.db)
    try:
        curves = served_curves(store, cfg.source)
    finally:
        store.close()
    if curves and curves[0].best:
        c, b = curves[0], curves[0].best
        click.echo(f"served curve of {c.source}: {len(c.points)} step{'s' if len(c.points) != 1 else ''}; best served step {b.step} "
                   f"({b.served:.1%} of {b.n}), serve it: {c.promote_command}")
        click.echo(f"see: maze-eval leaderboard --curves | maze-eval report --curve {c.source}")


COMMANDS = [watch]
