"""``maze-serve adapters ...``: list, push, promote, roll back, canary and remove adapters, in S3 or
through a gateway's management routes."""

from __future__ import annotations

import json

import click

from agent.cli_boundary import json_option
from serving.cli import placement
from serving.cli.common import config_of, gateway_options, store_of
from serving.errors import BadAdapterName, BadRequest


@click.group()
@gateway_options
@click.pass_context
def adapters(ctx: click.Context, gateway: str | None, api_key: str | None) -> None:
    """List, push, promote, roll back, canary and remove LoRA adapters in the config's S3 prefix.

    With --gateway the commands go through that gateway's management routes, where the API key's
    role decides (a publisher on the names its models cover, an admin on any); without it they
    write S3 directly with the caller's AWS credentials (IAM decides; docs/serving.md)."""
    if gateway:
        ctx.find_root().obj["gateway"] = (gateway, api_key)


@adapters.command("list")
@json_option()
@click.pass_context
def adapters_list(ctx: click.Context, as_json: bool) -> None:
    """Published adapters with their versions."""
    cfg = config_of(ctx)
    refs = store_of(cfg).list()
    if as_json:
        click.echo(json.dumps([r.__dict__ for r in refs], indent=2))
        return
    for r in refs:
        canary = f"\tcanary {r.canary.version} {r.canary.weight:g}%" if r.canary else ""
        click.echo(f"{r.name}\t{r.version}\trank {r.rank}\tbase {r.base}\t{r.pushed_at}{canary}")


@adapters.command("push")
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
@click.argument("name")
@click.option("--base", help="base model id the adapter is for (default: the config's first)")
@click.option("--force", is_flag=True, help="replace an existing adapter of that name")
@click.option("--canary", "weight", help="do not replace the version served: make the new one NAME's canary, "
              "serving this percent of its sessions (see `adapters canary`)")
@click.pass_context
def adapters_push(ctx: click.Context, folder: str, name: str, base: str | None, force: bool, weight: str | None) -> None:
    """Validate FOLDER (a peft LoRA) and publish it atomically as NAME."""
    cfg = config_of(ctx)
    spec = cfg.base(base) if base else cfg.base_models[0]
    if spec is None:
        raise BadRequest(f"unknown base {base!r}; known: {[m.id for m in cfg.base_models]}")
    ref = store_of(cfg).push(folder, name, base=spec.id, base_source=spec.source, max_rank=cfg.lora.max_rank, force=force,
                           canary=weight)
    if weight is not None:
        click.echo(f"published {spec.id}:{ref.name} version {ref.canary.version} as a canary "
                   f"({ref.canary.weight:g}%; {ref.version} serves the rest)")
        return
    click.echo(f"published {spec.id}:{ref.name} version {ref.version}")


@adapters.command("rm")
@click.argument("name")
@click.pass_context
def adapters_rm(ctx: click.Context, name: str) -> None:
    """Unpublish NAME and delete its files."""
    ref = store_of(config_of(ctx)).remove(name)
    click.echo(f"removed {ref.name} (version {ref.version})")


@adapters.command("promote")
@click.argument("target", metavar="NAME@VERSION|NAME")
@click.pass_context
def adapters_promote(ctx: click.Context, target: str) -> None:
    """Point NAME at VERSION (any version ever pushed under NAME); served within the resolver's TTL.

    NAME alone promotes its running canary (which then ends)."""
    from serving.adapters import split_model_name

    name, version = split_model_name(target)
    ref = store_of(config_of(ctx)).promote(name, version)
    click.echo(f"{ref.name} -> {ref.version}")


@adapters.command("canary")
@click.argument("target", metavar="NAME@VERSION")
@click.option("--weight", required=True, help="percent of NAME's sessions VERSION serves (0-100)")
@click.pass_context
def adapters_canary(ctx: click.Context, target: str, weight: str) -> None:
    """Serve VERSION to WEIGHT percent of NAME's sessions, its current version to the rest.

    Starts a canary, or re-weights or replaces the running one. Each session (the X-Session-Id
    header, else the OpenAI `user` field, else the request id) stays on one version. End it with
    `adapters promote NAME` or `adapters abort NAME`."""
    from serving.adapters import split_model_name

    name, version = split_model_name(target)
    if version is None:
        raise BadAdapterName(f"{target!r} names no version: use NAME@VERSION (see `adapters history NAME`)")
    ref = store_of(config_of(ctx)).canary(name, version, weight)
    click.echo(f"{ref.name} -> {ref.version} ({100 - ref.canary.weight:g}%), canary {ref.canary.version} "
               f"({ref.canary.weight:g}%)")


@adapters.command("abort")
@click.argument("name")
@click.pass_context
def adapters_abort(ctx: click.Context, name: str) -> None:
    """End NAME's canary unpromoted: its current version serves every session again."""
    ref = store_of(config_of(ctx)).abort_canary(name)
    click.echo(f"{ref.name} -> {ref.version}")


@adapters.command("rollback")
@click.argument("name")
@click.pass_context
def adapters_rollback(ctx: click.Context, name: str) -> None:
    """Point NAME back at the version it served before its last move."""
    ref = store_of(config_of(ctx)).rollback(name)
    click.echo(f"{ref.name} -> {ref.version}")


@adapters.command("history")
@click.argument("name")
@json_option()
@click.pass_context
def adapters_history(ctx: click.Context, name: str, as_json: bool) -> None:
    """NAME's moves, newest first: version, time, action (the first line is the version served)."""
    moves = store_of(config_of(ctx)).history(name)
    if as_json:
        click.echo(json.dumps([m.__dict__ for m in moves], indent=2))
        return
    for m in moves:
        click.echo(f"{m.version}\t{m.at}\t{m.action}" + (f"\t{m.weight:g}%" if m.weight is not None else ""))


for _command in placement.COMMANDS:
    adapters.add_command(_command)

COMMANDS = [adapters]
