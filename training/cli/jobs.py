"""``maze-train submit | status | list | stop | logs``: training jobs on a Ray cluster (Ray Jobs SDK)."""

from __future__ import annotations

import asyncio
import json
import sys

import click

from agent.cli import EXIT_FAILED, EXIT_OK, json_option
from training.cli.common import ADDRESS, DB, SPEC_ARG, job_client, load_spec, quiet_ray_client
from training.cli.curves import record_points
from training.errors import InvalidSpec
from training.jobs import follow_metrics, new_submission_id
from training.local_job import local_entrypoint
from training.lora_targets import serving_mismatch
from training.overrides import render_entrypoint


@click.command()
@ADDRESS
@click.option("--trainer", type=click.Choice(["skyrl", "local"]), default="skyrl", show_default=True)
@click.option("--submission-id", help="job id (default: generated); resubmitting a spec resumes its checkpoints")
@click.option("--resource", "resources", multiple=True, metavar="NAME=AMOUNT",
              help="custom Ray resource the job's driver needs (repeatable), e.g. maze_worker_1=1 to run it on that node")
@click.option("--serving-config", help="serving config (name or YAML) the job's adapters will be published to "
                                       "(default: the embedded one); LoRA targets it would not serve are refused")
@SPEC_ARG
def submit(address: str, trainer: str, submission_id: str | None, resources: tuple[str, ...],
           serving_config: str | None, spec_path: str | None) -> None:
    """Submit SPEC (default: the reference) as a Ray job; prints the submission id.

    A SkyRL spec whose LoRA targets reach the vision tower is refused (exit 2) when the serving
    config has lora.vision_tower off: its adapters would be refused at publish. The local trainer
    always targets the language model, so it is not checked."""
    needs = _resources(resources)
    spec = load_spec(spec_path)
    if trainer == "skyrl":
        _check_served(spec, serving_config)
    entrypoint = render_entrypoint(spec) if trainer == "skyrl" else local_entrypoint(spec)
    sid = submission_id or new_submission_id(trainer)
    meta = {"trainer": trainer, "base": spec.model.path.rstrip("/").rsplit("/", 1)[-1], "env_id": spec.env.env_id,
            "export_path": spec.output.export_path, "run_name": spec.name}
    client = job_client(address)
    with quiet_ray_client():
        click.echo(client.submit(entrypoint, submission_id=sid, env_vars=dict(spec.env_vars), metadata=meta,
                                 resources=needs))


def _check_served(spec, serving_config: str | None) -> None:
    """Refuse ``spec`` (InvalidSpec) when the serving config would not serve the adapters it trains."""
    from serving.config import load_config  # serving's config only: no boto3, no vLLM

    try:
        cfg = load_config(serving_config)
    except (OSError, ValueError) as exc:  # a missing file, an unknown name, a config that does not validate
        raise InvalidSpec(f"serving config {serving_config}: {exc}") from None
    try:
        reason = serving_mismatch(spec, vision_tower=cfg.lora.vision_tower, serving_config=serving_config or "embedded")
    except ValueError as exc:
        raise InvalidSpec(str(exc)) from None
    if reason:
        raise InvalidSpec(reason)


def _resources(pairs: tuple[str, ...]) -> dict[str, float]:
    out = {}
    for pair in pairs:
        name, sep, amount = pair.partition("=")
        try:
            value = float(amount)
        except ValueError:
            value = -1.0
        if not sep or not name or value <= 0:
            raise InvalidSpec(f"--resource {pair!r}: expected NAME=AMOUNT with AMOUNT > 0")
        out[name] = value
    return out


@click.command()
@ADDRESS
@click.argument("submission_id")
@json_option()
def status(address: str, submission_id: str, as_json: bool) -> None:
    """Status of a job (PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED)."""
    info = job_client(address).info(submission_id)
    click.echo(json.dumps(info.__dict__) if as_json else f"{info.submission_id}\t{info.status}\t{info.message or ''}")


@click.command("list")
@ADDRESS
def list_jobs(address: str) -> None:
    """Jobs on the cluster."""
    for info in job_client(address).list():
        click.echo(f"{info.submission_id}\t{info.status}\t{info.metadata.get('trainer', '-')}\t{info.entrypoint[:80]}")


@click.command()
@ADDRESS
@click.argument("submission_id")
def stop(address: str, submission_id: str) -> None:
    """Stop a running job (its checkpoints stay; submit again to resume)."""
    click.echo("stopped" if job_client(address).stop(submission_id) else "not running")


@click.command()
@ADDRESS
@click.argument("submission_id")
@click.option("--follow", is_flag=True, help="stream until the job ends, recording curve points as they appear")
@DB
def logs(address: str, submission_id: str, follow: bool, db: str | None) -> None:
    """Print a job's logs; with --follow, stream them and record step metrics in the store."""
    client = job_client(address)
    if not follow:
        click.echo(client.logs(submission_id), nl=False)
        return
    meta = client.info(submission_id).metadata
    base, env_id = meta.get("base", "?"), meta.get("env_id", "?")
    asyncio.run(follow_metrics(client, submission_id, on_line=click.echo,
                               on_metrics=lambda sm: record_points(db, submission_id, base, env_id, [sm])))
    info = client.info(submission_id)
    sys.exit(EXIT_OK if info.status == "SUCCEEDED" else EXIT_FAILED)


COMMANDS = [submit, status, list_jobs, stop, logs]
