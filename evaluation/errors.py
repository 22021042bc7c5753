"""The evaluation package's errors; ``exit_code`` is what ``maze-eval`` returns for each (mapped once,
at the CLI's boundary)."""

from __future__ import annotations


class EvalError(Exception):
    """An evaluation could not start: bad input (options, an unknown run, a malformed version)."""

    exit_code = 2


class UnknownRun(EvalError):
    """No run with this id in the results store."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no run {run_id!r}")
        self.run_id = run_id


class EndpointUnavailable(EvalError):
    """The endpoint is unreachable or does not serve the requested model."""

    exit_code = 3
