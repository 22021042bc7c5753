"""The evaluation package's errors; ``exit_code`` is what ``maze-eval`` returns for each (mapped once,
at the CLI's boundary)."""

from __future__ import annotations

from agent.cli import EXIT_BAD_INPUT, EXIT_UNAVAILABLE


class EvalError(Exception):
    """An evaluation could not start: bad input (options, an unknown run, a malformed version)."""

    exit_code = EXIT_BAD_INPUT


class UnknownRun(EvalError):
    """No run with this id in the results store."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no run {run_id!r}")
        self.run_id = run_id


class EndpointUnavailable(EvalError):
    """The endpoint is unreachable or does not serve the requested model."""

    exit_code = EXIT_UNAVAILABLE


def database_failure(exc: BaseException) -> tuple[int, str] | None:
    """A results-database failure's exit code and message, for every tool that uses the store: a
    bad URL or a file that cannot be opened is bad input; a database that does not answer (or
    refuses the connection) is unavailable. None for anything else."""
    if not type(exc).__module__.startswith("sqlalchemy"):
        return None
    from sqlalchemy import exc as sa

    if isinstance(exc, sa.ArgumentError):
        return EXIT_BAD_INPUT, f"bad results database URL: {exc}"
    if not isinstance(exc, (sa.OperationalError, sa.InterfaceError)):
        return None
    if "unable to open database file" in str(exc.orig):
        return EXIT_BAD_INPUT, (f"cannot open the results database file ({exc.orig}); "
                                "check --db and its folder's permissions")
    url = getattr(exc, "url", None) or "the results database"
    return EXIT_UNAVAILABLE, f"{url} unavailable: {str(exc.orig).strip()}"
