"""``maze-serve``: run the gateway (up/down/status, or a local multi-node cluster), render its manifest, manage adapters.

Exit codes (agent.cli_boundary's table; serving's errors map by their HTTP status): 0 ok; 1 the
embedded stack could not start or stop (port taken, model missing, not ready), `status` not
ready, or an unexpected error; 2 bad input (invalid adapter, bad name or version, bad canary
weight, bad config, no permission or a key a gateway refused (401, 403, 429), missing file); 3
adapter store or gateway unavailable; 4 not found / already exists / nothing to roll back to / no
canary running / the alias changed concurrently; 130 interrupted. Every failure is one line on
stderr; ``--verbose`` adds the traceback.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import click
import yaml
from pydantic import ValidationError

from agent.cli_boundary import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, boundary_group, json_option
from serving.adapters import AdapterStore
from serving.cli_placement import register as register_placement
from serving.config import ServingConfig, load_config
from serving.errors import BadAdapterName, BadConfig, BadRequest, ServingError

log = logging.getLogger("maze-serve")


def _error_of(exc: BaseException) -> tuple[int, str] | None:
    """maze-serve's expected failures besides serving's own errors, which the boundary maps by their
    HTTP status, the same for every tool (a stack that cannot start or stop: 1; see the module
    docstring for the codes)."""
    if isinstance(exc, (ValidationError, yaml.YAMLError)):
        return EXIT_BAD_INPUT, f"bad serving config: {exc}"
    return None


def _config(ctx: click.Context) -> ServingConfig:
    try:
        return load_config(ctx.obj["config"])
    except (ValidationError, ValueError, OSError, yaml.YAMLError) as exc:
        raise BadConfig(f"bad serving config: {exc}") from exc


def _store(cfg: ServingConfig) -> AdapterStore:
    """The config's S3 store, or with ``adapters --gateway URL`` the gateway's management routes
    (the caller's API key and role decide there; serving.gateway_client)."""
    from serving.s3 import export_s3_env

    gateway = click.get_current_context().find_root().obj.get("gateway")
    if gateway is not None:
        from serving.gateway_client import GatewayAdapters

        return GatewayAdapters(*gateway)
    export_s3_env(cfg)  # credentials for a local S3 server when the config points at one
    return AdapterStore(cfg.adapters)


def _gateway_options(fn):
    fn = click.option("--api-key", envvar="MAZE_API_KEY", help="the gateway's API key (env MAZE_API_KEY)")(fn)
    return click.option("--gateway", envvar="MAZE_GATEWAY_URL",
                        help="a gateway's base URL (env MAZE_GATEWAY_URL)")(fn)


@click.group(cls=boundary_group(_error_of),
             context_settings={"auto_envvar_prefix": "MAZE", "help_option_names": ["-h", "--help"]})
@click.option("-c", "--config", "config", help="shipped config name (embedded, production) or YAML path; default: embedded")
@click.option("-v", "--verbose", is_flag=True, help="debug logging")
@click.pass_context
def main(ctx: click.Context, config: str | None, verbose: bool) -> None:
    """Serve maze agents: an OpenAI-compatible gateway with LoRA adapters from S3."""
    # Progress and results are printed by the commands; library INFO lines (botocore, Ray) only with --verbose.
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    ctx.ensure_object(dict)["config"] = config


@main.command()
@click.option("-o", "--out", type=click.Path(dir_okay=False), help="write to this file instead of stdout")
@click.pass_context
def render(ctx: click.Context, out: str | None) -> None:
    """Print the KubeRay RayService manifest for the config (default: production, the cluster one)."""
    from serving.k8s import render_yaml

    if ctx.obj["config"] is None:  # the embedded default is a laptop stack, not a cluster
        ctx.obj["config"] = "production"
    cfg = _config(ctx)
    try:
        text = render_yaml(cfg)
    except ValueError as exc:  # a config the cluster cannot run as such (e.g. ingress: direct)
        raise BadConfig(str(exc)) from exc
    if out:
        Path(out).write_text(text)
        click.echo(out)
    else:
        click.echo(text, nl=False)


@main.command()
@click.option("--timeout", default=900.0, show_default=True, help="seconds to wait for readiness")
@click.pass_context
def up(ctx: click.Context, timeout: float) -> None:
    """Start the embedded stack (local S3 + Ray + gateway on 127.0.0.1); prints the base_url when ready."""
    from serving import embedded

    cfg = _config(ctx)
    try:
        base_url = embedded.up(cfg, ready_timeout=timeout, progress=lambda msg: click.echo(f"... {msg}", err=True))
    except embedded.EmbeddedError:
        raise
    except ServingError as exc:  # whatever else stopped the stack from starting leaves with the stack's code
        raise embedded.EmbeddedError(str(exc)) from exc
    click.echo(base_url)


@main.command()
def down() -> None:
    """Stop the embedded stack started by `up`."""
    from serving import embedded

    click.echo("stopped" if embedded.down(progress=lambda msg: click.echo(f"... {msg}", err=True)) else "not running")


@main.command()
@json_option()
def status(as_json: bool) -> None:
    """Show whether the embedded stack runs and is ready (exit 1 when not ready)."""
    from serving import embedded

    info = embedded.status()
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        state = "ready" if info["ready"] else ("starting or unhealthy" if info["running"] else "not running")
        click.echo(f"{state}" + (f"\t{info['base_url']}\tmetrics {info['metrics_url']}" if info["running"] else ""))
    sys.exit(EXIT_OK if info["ready"] else EXIT_FAILED)


@main.command()
@click.argument("name", required=False)
@click.option("-n", "--lines", default=40, show_default=True, help="lines from the end of NAME")
def logs(name: str | None, lines: int) -> None:
    """List the embedded stack's log files; with NAME (a file name or path from the list), print its end."""
    from serving import embedded

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


@main.group()
@_gateway_options
@click.pass_context
def adapters(ctx: click.Context, gateway: str | None, api_key: str | None) -> None:
    """List, push, promote, roll back, canary and remove LoRA adapters in the config's S3 prefix.

    With --gateway the commands go through that gateway's management routes, where the API key's
    role decides (a publisher on the names its models cover, an admin on any); without it they
    write S3 directly with the caller's AWS credentials (IAM decides; docs/serving.md)."""
    if gateway:
        ctx.find_root().obj["gateway"] = (gateway, api_key)


def _s3_store(cfg: ServingConfig) -> AdapterStore:
    """The S3 store itself: placement (pin, unpin, where) has no gateway route."""
    if click.get_current_context().find_root().obj.get("gateway") is not None:
        raise BadRequest("pin, unpin and where write the store directly (no gateway route): run them without "
                         "--gateway / MAZE_GATEWAY_URL, with the store's credentials")
    return _store(cfg)


register_placement(adapters, lambda ctx: _config(ctx), _s3_store, json_option)


@adapters.command("list")
@json_option()
@click.pass_context
def adapters_list(ctx: click.Context, as_json: bool) -> None:
    """Published adapters with their versions."""
    cfg = _config(ctx)
    refs = _store(cfg).list()
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
    cfg = _config(ctx)
    spec = cfg.base(base) if base else cfg.base_models[0]
    if spec is None:
        raise BadRequest(f"unknown base {base!r}; known: {[m.id for m in cfg.base_models]}")
    ref = _store(cfg).push(folder, name, base=spec.id, base_source=spec.source, max_rank=cfg.lora.max_rank, force=force,
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
    ref = _store(_config(ctx)).remove(name)
    click.echo(f"removed {ref.name} (version {ref.version})")


@adapters.command("promote")
@click.argument("target", metavar="NAME@VERSION|NAME")
@click.pass_context
def adapters_promote(ctx: click.Context, target: str) -> None:
    """Point NAME at VERSION (any version ever pushed under NAME); served within the resolver's TTL.

    NAME alone promotes its running canary (which then ends)."""
    from serving.adapters import split_model_name

    name, version = split_model_name(target)
    ref = _store(_config(ctx)).promote(name, version)
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
    ref = _store(_config(ctx)).canary(name, version, weight)
    click.echo(f"{ref.name} -> {ref.version} ({100 - ref.canary.weight:g}%), canary {ref.canary.version} "
               f"({ref.canary.weight:g}%)")


@adapters.command("abort")
@click.argument("name")
@click.pass_context
def adapters_abort(ctx: click.Context, name: str) -> None:
    """End NAME's canary unpromoted: its current version serves every session again."""
    ref = _store(_config(ctx)).abort_canary(name)
    click.echo(f"{ref.name} -> {ref.version}")


@adapters.command("rollback")
@click.argument("name")
@click.pass_context
def adapters_rollback(ctx: click.Context, name: str) -> None:
    """Point NAME back at the version it served before its last move."""
    ref = _store(_config(ctx)).rollback(name)
    click.echo(f"{ref.name} -> {ref.version}")


@adapters.command("history")
@click.argument("name")
@json_option()
@click.pass_context
def adapters_history(ctx: click.Context, name: str, as_json: bool) -> None:
    """NAME's moves, newest first: version, time, action (the first line is the version served)."""
    moves = _store(_config(ctx)).history(name)
    if as_json:
        click.echo(json.dumps([m.__dict__ for m in moves], indent=2))
        return
    for m in moves:
        click.echo(f"{m.version}\t{m.at}\t{m.action}" + (f"\t{m.weight:g}%" if m.weight is not None else ""))



@main.command()
@click.option("--since", default="1h", show_default=True, help="how far back: 90s, 30m, 2h, 1d")
@click.option("--key", "key_name", help="one key's name (an admin sees every key, another key its own)")
@_gateway_options
@json_option()
def usage(since: str, key_name: str | None, gateway: str | None, api_key: str | None, as_json: bool) -> None:
    """Requests, errors and tokens per API key and model, from the gateway (default: the embedded stack)."""
    from serving import embedded
    from serving.gateway_client import GatewayAdapters

    if gateway is None:
        info = embedded.status()
        if not info["running"]:
            raise BadRequest("no gateway: pass --gateway URL (or MAZE_GATEWAY_URL), or start one with `maze-serve up`")
        gateway = info["base_url"]
    out = GatewayAdapters(gateway, api_key).usage(since, key_name)
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    if not out["auth"]:
        click.echo("the gateway runs without API keys: no usage per key is recorded", err=True)
    click.echo("key\tmodel\trequests\terrors\tprompt_tokens\tcompletion_tokens")
    for r in out["data"]:
        click.echo(f"{r['key']}\t{r['model']}\t{r['requests']}\t{r['errors']}\t{r['prompt_tokens']}\t"
                   f"{r['completion_tokens']}")


@main.group()
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
    from serving import cluster as local_cluster

    if ctx.obj["config"] is None:
        ctx.obj["config"] = "cluster"
    cfg = _config(ctx)
    state = local_cluster.up(cfg, workers=workers, app=not no_app, ready_timeout=timeout,
                             progress=lambda msg: click.echo(f"... {msg}", err=True))
    click.echo(f"ray {state.ray_address}\tjobs {state.dashboard_url}\tshared {state.shared_dir}", err=True)
    click.echo(state.base_url or state.dashboard_url)


@cluster.command("down")
def cluster_down() -> None:
    """Stop every node of the local cluster, then S3."""
    from serving import cluster as local_cluster

    click.echo("stopped" if local_cluster.down() else "not running")


@cluster.command("status")
@click.option("--json", "as_json", is_flag=True)
def cluster_status(as_json: bool) -> None:
    """Nodes alive, workers, readiness (exit 1 when not running or the gateway is not ready)."""
    from serving import cluster as local_cluster

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
    from serving import cluster as local_cluster

    click.echo(f"killed {len(local_cluster.kill_worker(worker))} processes of worker {worker}")


@cluster.command("restart")
@click.argument("worker", type=int)
def cluster_restart(worker: int) -> None:
    """Start worker node WORKER again (a replacement machine with the same resources)."""
    from serving import cluster as local_cluster

    node = local_cluster.restart_worker(worker)
    click.echo(f"worker {worker} started (pid {node.pid})")


if __name__ == "__main__":
    main()
