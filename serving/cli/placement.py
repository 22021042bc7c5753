"""``maze-serve adapters pin | unpin | where``: placement controls over the store (serving.placement).

They write the store directly: placement has no gateway route.
"""

from __future__ import annotations

import json

import click

from agent.cli import json_option
from serving.cli.common import config_of, s3_store
from serving.placement import PIN_REFRESH_S, PlacementStore, where_rows


@click.command("pin")
@click.argument("name")
@click.pass_context
def adapters_pin(ctx: click.Context, name: str) -> None:
    """Keep NAME resident on every replica (loaded without waiting for a request, never evicted)."""
    cfg = config_of(ctx)
    pins = PlacementStore(s3_store(cfg)).pin(name, cfg.lora.adapters_per_replica)
    click.echo(f"pinned {name} ({len(pins)} of {cfg.lora.adapters_per_replica} slots per replica pinned); "
               f"replicas load it within {PIN_REFRESH_S:.0f}s")


@click.command("unpin")
@click.argument("name")
@click.pass_context
def adapters_unpin(ctx: click.Context, name: str) -> None:
    """Let NAME be evicted again like any other adapter."""
    pins = PlacementStore(s3_store(config_of(ctx))).unpin(name)
    click.echo(f"unpinned {name}; pinned now: {', '.join(sorted(pins)) or 'none'}")


@click.command("where")
@json_option()
@click.pass_context
def adapters_where(ctx: click.Context, as_json: bool) -> None:
    """Which replica holds which adapter version, its last use, and whether it is pinned."""
    placement = PlacementStore(s3_store(config_of(ctx)))
    rows = where_rows(placement.reports(), placement.pins())
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no replica reports a resident adapter")
        return
    for r in rows:
        last = "-" if r["last_use_s"] is None else f"{r['last_use_s']:.0f}s ago"
        flags = " pinned" if r["pinned"] else ""
        flags += " (stale report: replica gone?)" if r["stale"] else ""
        click.echo(f"{r['node']}\t{r['replica']}\t{r['adapter']}\tlast use {last}{flags}")


COMMANDS = [adapters_pin, adapters_unpin, adapters_where]
