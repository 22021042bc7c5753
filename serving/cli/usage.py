"""``maze-serve usage``: requests, errors and tokens per API key and model, from a gateway."""

from __future__ import annotations

import json

import click

from agent.cli import json_option
from serving.cli.common import gateway_options
from serving.errors import BadRequest


@click.command()
@click.option("--since", default="1h", show_default=True, help="how far back: 90s, 30m, 2h, 1d")
@click.option("--key", "key_name", help="one key's name (an admin sees every key, another key its own)")
@gateway_options
@json_option()
def usage(since: str, key_name: str | None, gateway: str | None, api_key: str | None, as_json: bool) -> None:
    """Requests, errors and tokens per API key and model, from the gateway (default: the embedded stack)."""
    from serving.cli.gateway_client import GatewayAdapters
    from serving.local import embedded

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


COMMANDS = [usage]
