"""The one place a command-line tool turns an exception into one line on stderr and an exit code.

A CLI's click group is built with ``cls=boundary_group(error_map)``: ``error_map`` maps the
exceptions the tool expects (its package's error tree, a database or network failure) to
``(exit_code, message)``; :func:`common_failure` maps those every tool shares (files,
permissions, connections). Anything else is reported as an unexpected error, still in one line.
``--verbose`` (a ``verbose`` parameter of the group) adds the traceback. A failure is JSON on
stdout when the group's ``as_json`` parameter is set or the command was given :func:`json_option`'s
``--json``.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable

import click

ErrorMap = Callable[[BaseException], "tuple[int, str] | None"]
EXIT_FAILED, EXIT_BAD_INPUT, EXIT_UNAVAILABLE, EXIT_INTERRUPTED = 1, 2, 3, 130


def common_failure(exc: BaseException) -> tuple[int, str] | None:
    """Failures of the machine rather than of the tool: no permission, no such file, a refused connection."""
    if isinstance(exc, PermissionError):
        return EXIT_BAD_INPUT, f"no permission: {exc.filename or ''} ({exc.strerror or exc})".replace(":  (", ": (")
    if isinstance(exc, (FileNotFoundError, NotADirectoryError, IsADirectoryError)):
        return EXIT_BAD_INPUT, f"{exc.strerror or type(exc).__name__}: {exc.filename or exc}"
    if isinstance(exc, ConnectionError):
        return EXIT_UNAVAILABLE, f"connection failed: {exc}"
    if isinstance(exc, OSError):
        return EXIT_FAILED, f"{exc.strerror or type(exc).__name__}: {exc.filename or exc}"
    return None


def boundary_group(error_map: ErrorMap) -> type[click.Group]:
    """A ``click.Group`` class whose commands' exceptions leave through ``error_map``."""

    class BoundaryGroup(click.Group):
        def invoke(self, ctx: click.Context):
            try:
                return super().invoke(ctx)
            except (click.exceptions.Exit, click.ClickException, click.Abort):
                raise
            except KeyboardInterrupt:
                click.echo("interrupted", err=True)
                ctx.exit(EXIT_INTERRUPTED)
            except Exception as exc:  # noqa: BLE001 - the boundary: every failure leaves as one line
                code, message = error_map(exc) or common_failure(exc) or (
                    EXIT_FAILED, f"unexpected {type(exc).__name__}: {exc} (--verbose shows the traceback)")
                report(ctx, code, message, exc)

    return BoundaryGroup


JSON_META = "cli_boundary.as_json"


def _mark_json(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    # Context.meta is shared by a command's context and its group's, where the boundary reads it.
    if value:
        ctx.meta[JSON_META] = True
    return value


def json_option(help_text: str = "print the result as JSON on stdout"):
    """A subcommand's ``--json`` flag (parameter ``as_json``); with it, a failure is reported as JSON too."""
    return click.option("--json", "as_json", is_flag=True, callback=_mark_json, help=help_text)


def report(ctx: click.Context, code: int, message: str, exc: BaseException | None = None) -> None:
    """Print ``message`` as one line (JSON on stdout when the group's ``as_json`` is set, or a
    command's :func:`json_option`) and exit."""
    params = ctx.find_root().params
    if params.get("verbose") and exc is not None:
        traceback.print_exception(exc, file=sys.stderr)
    message = " ".join(str(message).split())  # one line, whatever the exception text held
    if params.get("as_json") or ctx.meta.get(JSON_META):
        click.echo(json.dumps({"error": message, "exit_code": code}))
    else:
        click.echo(f"error: {message}", err=True)
    ctx.exit(code)
