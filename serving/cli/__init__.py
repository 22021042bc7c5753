"""``maze-serve``: run the gateway (up/down/status, or a local multi-node cluster), render its manifest, manage adapters.

Exit codes (agent.cli's table; serving's errors map by their HTTP status): 0 ok; 1 the
embedded stack could not start or stop (port taken, model missing, not ready), `status` not
ready, or an unexpected error; 2 bad input (invalid adapter, bad name or version, bad canary
weight, bad config, no permission or a key a gateway refused (401, 403, 429), missing file, a key
file ``keys check`` fails); 3 adapter store or gateway unavailable; 4 not found / already exists /
nothing to roll back to / no canary running / the alias changed concurrently; 130 interrupted.
Every failure is one line on stderr (``keys check`` gives one per problem); ``--verbose`` adds the
traceback.

One module per command group: :mod:`~serving.cli.stack` (render, up, down, status, logs),
:mod:`~serving.cli.adapters` (the adapter store; with :mod:`~serving.cli.placement`'s pin, unpin,
where), :mod:`~serving.cli.usage`, :mod:`~serving.cli.keys` (a key file checked as the gateway
reads it) and :mod:`~serving.cli.cluster`; :mod:`~serving.cli.common` holds what they share and
:mod:`~serving.cli.gateway_client` the management routes' client.
"""

from __future__ import annotations

import logging

import click

from agent.cli import boundary_group
from serving.cli import adapters, cluster, keys, stack, usage
from serving.cli.common import error_of


@click.group(cls=boundary_group(error_of),
             context_settings={"auto_envvar_prefix": "MAZE", "help_option_names": ["-h", "--help"]})
@click.option("-c", "--config", "config", help="shipped config name (embedded, production) or YAML path; default: embedded")
@click.option("-v", "--verbose", is_flag=True, help="debug logging")
@click.pass_context
def main(ctx: click.Context, config: str | None, verbose: bool) -> None:
    """Serve maze agents: an OpenAI-compatible gateway with LoRA adapters from S3."""
    # Progress and results are printed by the commands; library INFO lines (botocore, Ray) only with --verbose.
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    ctx.ensure_object(dict)["config"] = config


for _group in (stack, adapters, usage, keys, cluster):
    for _command in _group.COMMANDS:
        main.add_command(_command)

__all__ = ["main"]
