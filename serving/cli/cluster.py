"""``maze-serve cluster up | down | status | kill | restart``: a local multi-node Ray cluster on 127.0.0.1."""

from __future__ import annotations

import json
import sys

import click

from agent.cli import EXIT_FAILED, EXIT_OK
from serving.cli.common import config_of


@click.group()
def cluster() -> None:
    """A local multi-node Ray cluster on 127.0.0.1 (head + workers, shared folder, local S3) running
    the production layout (default config: cluster). Its state lives in $MAZE_HOME/cluster."""


@cluster.command("up")
@click.option("--workers", default=2, show_default=True, type=click.IntRange(1, 8), help="worker nodes")
@click.option("--no-app", is_flag=True, help="nodes, S3 and the shared folder only (e.g. for training jobs)")
@click.option("--timeout", default=900.0, show_default=True, help="seconds to wait for readiness")
@click.pass_context
def cluster_up(ctx: click.Context, workers: int, no_app: bool, timeout: float) -> None:
    """Start the head, WORKERS worker nodes and the gateway; prints the base_url (or the Ray address)."""
    from serving.local import cluster as local_cluster

    if ctx.obj["config"] is None:
        ctx.obj["config"] = "cluster"
    cfg = config_of(ctx)
    state = local_cluster.up(cfg, workers=workers, app=not no_app, ready_timeout=timeout,
                             progress=lambda msg: click.echo(f"... {msg}", err=True))
    click.echo(f"ray {state.ray_address}\tjobs {state.dashboard_url}\tshared {state.shared_dir}", err=True)
    click.echo(state.base_url or state.dashboard_url)


@cluster.command("down")
def cluster_down() -> None:
    """Stop every node of the local cluster, then S3."""
    from serving.local import cluster as local_cluster

    click.echo("stopped" if local_cluster.down() else "not running")


@cluster.command("status")
@click.option("--json", "as_json", is_flag=True)
def cluster_status(as_json: bool) -> None:
    """Nodes alive, workers, readiness (exit 1 when not running or the gateway is not ready)."""
    from serving.local import cluster as local_cluster

    info = local_cluster.status()
    if as_json:
        click.echo(json.dumps(info, indent=2, default=str))
    elif not info["running"]:
        click.echo("not running")
    else:
        alive = ", ".join(f"worker {i} {'up' if ok else 'DOWN'}" for i, ok in info["workers_alive"].items())
        click.echo(f"{info['alive_nodes']} nodes alive ({alive})\tready {info['ready']}\t{info['base_url'] or ''}")
    sys.exit(EXIT_OK if info["running"] and info.get("ready") is not False else EXIT_FAILED)


@cluster.command("kill")
@click.argument("worker", type=int)
def cluster_kill(worker: int) -> None:
    """SIGKILL every process of worker node WORKER (a lost machine)."""
    from serving.local import cluster as local_cluster

    click.echo(f"killed {len(local_cluster.kill_worker(worker))} processes of worker {worker}")


@cluster.command("restart")
@click.argument("worker", type=int)
def cluster_restart(worker: int) -> None:
    """Start worker node WORKER again (a replacement machine with the same resources)."""
    from serving.local import cluster as local_cluster

    node = local_cluster.restart_worker(worker)
    click.echo(f"worker {worker} started (pid {node.pid})")


COMMANDS = [cluster]
