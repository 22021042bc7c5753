"""``maze-serve keys check FILE``: a key file checked offline with the gateway's own reader and rules.

Run it before a key file is deployed (in CI, before ``kubectl create secret``): what it passes, the
gateway loads; what it fails, the gateway refuses with the same messages, each naming an entry and
a field, never a value (``serving.auth.check_key_file``).
"""

from __future__ import annotations

import json

import click

from agent.cli import EXIT_BAD_INPUT, EXIT_OK, json_option


@click.group()
def keys() -> None:
    """API key files (auth.keys_file, auth.keys_env)."""


@keys.command("check")
@click.argument("file", type=click.Path(dir_okay=True, path_type=str))
@click.option("--strict", is_flag=True, help="notices fail too (exit 2): an entry that loads but should be changed")
@json_option("print the report as JSON on stdout")
@click.pass_context
def keys_check(ctx: click.Context, file: str, strict: bool, as_json: bool) -> None:
    """Check the key file FILE as the gateway reads it: exit 0 when it loads (notices, such as a `sha256`
    entry without `min_secret_length`, on stderr), 2 with one line per problem when the gateway would
    refuse it."""
    from serving.auth import check_key_file

    report = check_key_file(file)
    failed = not report.ok or (strict and bool(report.notices))
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2))
    elif report.ok:
        disabled = report.entries - report.keys
        click.echo(f"{file}: valid: {_count(report.keys, 'key')} with {_count(report.secrets, 'secret')}"
                   + (f" ({disabled} disabled or without secrets: refused)" if disabled else ""))
        for notice in report.notices:
            click.echo(f"{'error' if strict else 'notice'}: {file}: {notice}", err=True)
    else:
        for problem in report.problems:
            click.echo(f"error: {file}: {problem}", err=True)
        click.echo(f"{file}: the gateway would refuse this key file (a replica that loaded an earlier one keeps "
                   "its keys for auth.keys_grace_s, then answers 503)", err=True)
    ctx.exit(EXIT_BAD_INPUT if failed else EXIT_OK)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


COMMANDS = [keys]
