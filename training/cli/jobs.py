"""``maze-train`` commands that talk to a Ray cluster, the evaluation store and the adapter store.

submit / status / logs [--follow] / stop / list (Ray Jobs SDK), sync (curve points into the
store), checkpoints and publish (a chosen export step -> serving's validated, atomic push).
Exit codes: 0 ok, 1 job failed or command failed, 2 bad input, 3 cluster or store unavailable.
"""

from __future__ import annotations

import asyncio
import json
import sys

import click

from training.checkpoints import fetch_step, list_steps
from training.jobs import JobClient, JobError, follow_metrics, new_submission_id
from training.metrics import StepMetrics, parse_log_lines

ADDRESS = click.option("--address", envvar="RAY_ADDRESS", required=True,
                       help="Ray dashboard address (http://HOST:8265) or sagemaker_ray://CLUSTER/NAMESPACE")
DB = click.option("--db", help="evaluation store for curve points (default: MAZE_DB or the default SQLite file)")


def _client(address: str) -> JobClient:
    try:
        return JobClient(address)
    except JobError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(3)


def _fail(exc: Exception, code: int = 1) -> None:
    click.echo(f"error: {exc}", err=True)
    sys.exit(getattr(exc, "exit_code", code) if code == 1 else code)


def _record_points(db: str | None, source: str, base: str, env_id: str, points: list[StepMetrics]) -> int:
    from evaluation.store import Store

    store = Store(db)
    try:
        return sum(store.add_curve_point(source, base, env_id, p.step, k, v) for p in points for k, v in p.metrics.items())
    finally:
        store.close()


def register(main: click.Group, load_spec) -> None:
    """Add the cluster commands to the ``maze-train`` group."""

    @main.command()
    @ADDRESS
    @click.option("--trainer", type=click.Choice(["skyrl", "local"]), default="skyrl", show_default=True)
    @click.option("--submission-id", help="job id (default: generated); resubmitting a spec resumes its checkpoints")
    @click.argument("spec_path", metavar="[SPEC]", required=False, type=click.Path(exists=True, dir_okay=False))
    def submit(address: str, trainer: str, submission_id: str | None, spec_path: str | None) -> None:
        """Submit SPEC (default: the reference) as a Ray job; prints the submission id."""
        from training.local_job import local_entrypoint
        from training.overrides import render_entrypoint

        spec = load_spec(spec_path)
        entrypoint = render_entrypoint(spec) if trainer == "skyrl" else local_entrypoint(spec)
        sid = submission_id or new_submission_id(trainer)
        meta = {"trainer": trainer, "base": spec.model.path.rstrip("/").rsplit("/", 1)[-1], "env_id": spec.env.env_id,
                "export_path": spec.output.export_path, "run_name": spec.name}
        try:
            click.echo(_client(address).submit(entrypoint, submission_id=sid, env_vars=dict(spec.env_vars), metadata=meta))
        except JobError as exc:
            _fail(exc)

    @main.command()
    @ADDRESS
    @click.argument("submission_id")
    @click.option("--json", "as_json", is_flag=True)
    def status(address: str, submission_id: str, as_json: bool) -> None:
        """Status of a job (PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED)."""
        try:
            info = _client(address).info(submission_id)
        except JobError as exc:
            _fail(exc, 2)
        click.echo(json.dumps(info.__dict__) if as_json else f"{info.submission_id}\t{info.status}\t{info.message or ''}")

    @main.command("list")
    @ADDRESS
    def list_jobs(address: str) -> None:
        """Jobs on the cluster."""
        for info in _client(address).list():
            click.echo(f"{info.submission_id}\t{info.status}\t{info.metadata.get('trainer', '-')}\t{info.entrypoint[:80]}")

    @main.command()
    @ADDRESS
    @click.argument("submission_id")
    def stop(address: str, submission_id: str) -> None:
        """Stop a running job (its checkpoints stay; submit again to resume)."""
        try:
            click.echo("stopped" if _client(address).stop(submission_id) else "not running")
        except JobError as exc:
            _fail(exc, 2)

    @main.command()
    @ADDRESS
    @click.argument("submission_id")
    @click.option("--follow", is_flag=True, help="stream until the job ends, recording curve points as they appear")
    @DB
    def logs(address: str, submission_id: str, follow: bool, db: str | None) -> None:
        """Print a job's logs; with --follow, stream them and record step metrics in the store."""
        client = _client(address)
        try:
            if not follow:
                click.echo(client.logs(submission_id), nl=False)
                return
            meta = client.info(submission_id).metadata

            def on_metrics(sm: StepMetrics) -> None:
                _record_points(db, submission_id, meta.get("base", "?"), meta.get("env_id", "?"), [sm])

            asyncio.run(follow_metrics(client, submission_id, on_line=click.echo, on_metrics=on_metrics))
            info = client.info(submission_id)
        except JobError as exc:
            _fail(exc, 2)
        sys.exit(0 if info.status == "SUCCEEDED" else 1)

    @main.command()
    @ADDRESS
    @click.argument("submission_id")
    @click.option("--export", "export_path", help="also read dumped evals under this export path (local or s3://)")
    @DB
    def sync(address: str, submission_id: str, export_path: str | None, db: str | None) -> None:
        """Import a job's step metrics (logs and dumped evals) into the store as a training curve."""
        client = _client(address)
        try:
            meta = client.info(submission_id).metadata
            points = list(parse_log_lines(client.logs(submission_id).splitlines()))
        except JobError as exc:
            _fail(exc, 2)
        export_path = export_path or meta.get("export_path")
        if export_path:
            points += [StepMetrics(s.step, {"eval/true_pass_at_1": s.pass_at_1}) for s in list_steps(export_path)
                       if s.pass_at_1 is not None]
        added = _record_points(db, submission_id, meta.get("base", "?"), meta.get("env_id", "?"), points)
        click.echo(f"{added} new curve points from {len(points)} steps")

    @main.command()
    @click.argument("export_path")
    @click.option("--json", "as_json", is_flag=True)
    def checkpoints(export_path: str, as_json: bool) -> None:
        """Exported steps under EXPORT_PATH (local or s3://) with their eval pass@1."""
        steps = list_steps(export_path)
        if as_json:
            click.echo(json.dumps([s.__dict__ for s in steps], indent=2))
            return
        for s in steps:
            click.echo(f"{s.step}\t{'-' if s.pass_at_1 is None else f'{s.pass_at_1:.3f}'}\t{s.path}")

    @main.command()
    @click.option("--export", "export_path", required=True, help="export path of the run (local or s3://)")
    @click.option("--step", type=int, required=True, help="global step to publish")
    @click.option("--name", required=True, help="adapter name to publish as")
    @click.option("--serving-config", default=None, help="serving config (name or YAML) whose adapter store receives it")
    @click.option("--base", help="base model id (default: the serving config's first)")
    @click.option("--force", is_flag=True, help="replace an existing adapter of that name")
    def publish(export_path: str, step: int, name: str, serving_config: str | None, base: str | None, force: bool) -> None:
        """Push an exported step's adapter to the gateway's S3 store (validated, atomic)."""
        from serving.adapters import AdapterStore
        from serving.config import load_config
        from serving.embedded import s3_env
        from serving.errors import ServingError

        cfg = load_config(serving_config)
        spec = cfg.base(base) if base else cfg.base_models[0]
        if spec is None:
            _fail(ValueError(f"unknown base {base!r}"), 2)
        try:
            folder = fetch_step(export_path, step)
            s3_env(cfg)
            ref = AdapterStore(cfg.adapters).push(folder, name, base=spec.id, base_source=spec.source,
                                                  max_rank=cfg.lora.max_rank, force=force)
        except FileNotFoundError as exc:
            _fail(exc, 2)
        except ServingError as exc:
            _fail(exc, 3 if exc.status_code == 503 else 2)
        click.echo(f"published {spec.id}:{ref.name} version {ref.version} (step {step})")
