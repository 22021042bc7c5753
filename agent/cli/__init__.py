"""Where the command-line tools meet the library: every CLI's exit-code boundary, and ``maze-demo``.

:mod:`~agent.cli.boundary` is the one exit-code table of every tool (``maze-serve``,
``maze-eval``, ``maze-train``, ``maze-env``) and the one place a CLI turns an exception into one
line on stderr and its exit code; it lives in the core every tool already imports (serving may
import no other package). :mod:`~agent.cli.demo` is ``maze-demo``, the runner against the scripted
server.
"""

from agent.cli.boundary import (
    EXIT_BAD_INPUT,
    EXIT_CONFLICT,
    EXIT_FAILED,
    EXIT_INCOMPLETE,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    boundary_group,
    json_option,
)

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_CONFLICT",
    "EXIT_FAILED",
    "EXIT_INCOMPLETE",
    "EXIT_OK",
    "EXIT_UNAVAILABLE",
    "boundary_group",
    "json_option",
]
