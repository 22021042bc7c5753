"""The one place a command-line tool turns an exception into one line on stderr and an exit code.

Every tool exits with the codes of one table (``EXIT_*`` below; docs/cli.md lists them per tool).
The project's own errors are mapped the same way whichever tool meets them
(:func:`package_failure`): an error tree's ``exit_code`` (evaluation's, training's), or the HTTP
``status_code`` serving's errors carry (:func:`exit_code_for_status`), so an adapter that
already exists exits 4 from ``maze-serve`` and ``maze-train`` alike.

A CLI's click group is built with ``cls=boundary_group(error_map)``: ``error_map`` maps the
other exceptions the tool expects (a database, S3 or config-file failure) to
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

# The exit codes of every maze-* command.
EXIT_OK = 0
EXIT_FAILED = 1  # the command did not do what it was asked: a stack that did not start, a job that failed, a
# stack or gateway not ready (status), an unexpected error
EXIT_INCOMPLETE = EXIT_FAILED  # maze-eval, maze-train watch: errored episodes remain (a resume plays them)
EXIT_BAD_INPUT = 2  # options, spec or config, names and versions, unknown run or job, missing file, no permission
EXIT_UNAVAILABLE = 3  # a service the command needs does not answer: endpoint, S3, results database, cluster
EXIT_CONFLICT = 4  # the named thing is missing or in the way: adapter not found or already published, nothing to
# roll back to, no canary running, the alias changed concurrently
EXIT_INTERRUPTED = 130


def exit_code_for_status(status: int) -> int:
    """The exit code of an error that carries an HTTP status (serving's error tree; the agent's
    ``PolicyError`` with the endpoint's)."""
    if status in (404, 409):
        return EXIT_CONFLICT
    if status in (502, 503, 504):
        return EXIT_UNAVAILABLE
    if 400 <= status < 500:
        return EXIT_BAD_INPUT
    return EXIT_FAILED


def package_failure(exc: BaseException) -> tuple[int, str] | None:
    """The project's errors, the same code from every tool: the ``exit_code`` of an error tree that
    has one (evaluation, training), else the HTTP ``status_code`` of one that carries it (serving)."""
    code = getattr(exc, "exit_code", None)
    if isinstance(code, int):
        return code, str(exc)
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return exit_code_for_status(status), str(exc)
    return None


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
                code, message = package_failure(exc) or error_map(exc) or common_failure(exc) or (
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
