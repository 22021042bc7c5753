"""What the ``maze-serve`` commands share: the config, the adapter store (S3 or a gateway), options."""

from __future__ import annotations

import click
import yaml
from pydantic import ValidationError

from agent.cli import EXIT_BAD_INPUT
from serving.adapters import AdapterStore, export_s3_env
from serving.config import ServingConfig, load_config
from serving.errors import BadConfig, BadRequest


def error_of(exc: BaseException) -> tuple[int, str] | None:
    """maze-serve's expected failures besides serving's own errors, which the boundary maps by their
    HTTP status, the same for every tool (a stack that cannot start or stop: 1; see the module
    docstring for the codes)."""
    if isinstance(exc, (ValidationError, yaml.YAMLError)):
        return EXIT_BAD_INPUT, f"bad serving config: {exc}"
    return None


def config_of(ctx: click.Context) -> ServingConfig:
    """The config ``-c`` names (a BadConfig naming the problem when it does not load)."""
    try:
        return load_config(ctx.obj["config"])
    except (ValidationError, ValueError, OSError, yaml.YAMLError) as exc:
        raise BadConfig(f"bad serving config: {exc}") from exc


def store_of(cfg: ServingConfig) -> AdapterStore:
    """The config's S3 store, or with ``adapters --gateway URL`` the gateway's management routes
    (the caller's API key and role decide there; serving.cli.gateway_client)."""
    gateway = click.get_current_context().find_root().obj.get("gateway")
    if gateway is not None:
        from serving.cli.gateway_client import GatewayAdapters

        return GatewayAdapters(*gateway)
    export_s3_env(cfg)  # credentials for a local S3 server when the config points at one
    return AdapterStore(cfg.adapters)


def s3_store(cfg: ServingConfig) -> AdapterStore:
    """The S3 store itself: placement (pin, unpin, where) has no gateway route."""
    if click.get_current_context().find_root().obj.get("gateway") is not None:
        raise BadRequest("pin, unpin and where write the store directly (no gateway route): run them without "
                         "--gateway / MAZE_GATEWAY_URL, with the store's credentials")
    return store_of(cfg)


def gateway_options(fn):
    """``--gateway URL`` and ``--api-key``: a running gateway's management routes instead of S3."""
    fn = click.option("--api-key", envvar="MAZE_API_KEY", help="the gateway's API key (env MAZE_API_KEY)")(fn)
    return click.option("--gateway", envvar="MAZE_GATEWAY_URL",
                        help="a gateway's base URL (env MAZE_GATEWAY_URL)")(fn)


__all__ = ["config_of", "error_of", "gateway_options", "s3_store", "store_of"]
