"""``maze-serve render | up | down | status | logs``: the manifest, and the embedded stack on 127.0.0.1."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from agent.cli import EXIT_FAILED, EXIT_OK, json_option
from serving.cli.common import config_of
from serving.errors import BadConfig, ServingError


@click.command()
@click.option("-o", "--out", type=click.Path(dir_okay=False), help="write to this file instead of stdout")
@click.pass_context
def render(ctx: click.Context, out: str | None) -> None:
    """Print the KubeRay RayService manifest for the config (default: production, the cluster one)."""
    from serving.k8s import render_yaml

    if ctx.obj["config"] is None:  # the embedded default is a laptop stack, not a cluster
        ctx.obj["config"] = "production"
    cfg = config_of(ctx)
    try:
        text = render_yaml(cfg)
    except ValueError as exc:  # a config the cluster cannot run as such (e.g. ingress: direct)
        raise BadConfig(str(exc)) from exc
    if out:
        Path(out).write_text(text)
        click.echo(out)
    else:
        click.echo(text, nl=False)


@click.command()
@click.option("--timeout", default=900.0, show_default=True, help="seconds to wait for readiness")
@click.pass_context
def up(ctx: click.Context, timeout: float) -> None:
    """Start the embedded stack (local S3 + Ray + gateway on 127.0.0.1); prints the base_url when ready."""
    from serving.local import embedded

    cfg = config_of(ctx)
    try:
        base_url = embedded.up(cfg, ready_timeout=timeout, progress=lambda msg: click.echo(f"... {msg}", err=True))
    except embedded.EmbeddedError:
        raise
    except ServingError as exc:  # whatever else stopped the stack from starting leaves with the stack's code
        raise embedded.EmbeddedError(str(exc)) from exc
    click.echo(base_url)


@click.command()
def down() -> None:
    """Stop the embedded stack started by `up`."""
    from serving.local import embedded

    click.echo("stopped" if embedded.down(progress=lambda msg: click.echo(f"... {msg}", err=True)) else "not running")


@click.command()
@json_option()
def status(as_json: bool) -> None:
    """Show whether the embedded stack runs and is ready (exit 1 when not ready)."""
    from serving.local import embedded

    info = embedded.status()
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        state = "ready" if info["ready"] else ("starting or unhealthy" if info["running"] else "not running")
        click.echo(f"{state}" + (f"\t{info['base_url']}\tmetrics {info['metrics_url']}" if info["running"] else ""))
    sys.exit(EXIT_OK if info["ready"] else EXIT_FAILED)


@click.command()
@click.argument("name", required=False)
@click.option("-n", "--lines", default=40, show_default=True, help="lines from the end of NAME")
def logs(name: str | None, lines: int) -> None:
    """List the embedded stack's log files; with NAME (a file name or path from the list), print its end."""
    from serving.local import embedded

    files = embedded.log_files()
    if name is None:
        for path in files:
            click.echo(str(path))
        if not files:
            click.echo(f"no logs under {embedded.state_dir() / 'logs'}", err=True)
        return
    match = [p for p in files if str(p) == name or p.name == name]
    if not match:
        raise click.BadParameter(f"no log {name!r}; `maze-serve logs` lists them", param_hint="NAME")
    tail = match[-1].read_text(errors="replace").splitlines()[-lines:]
    click.echo("\n".join(tail))


COMMANDS = [render, up, down, status, logs]
