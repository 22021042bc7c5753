"""``maze-env``: the maze as an OpenEnv environment server.

Exit codes: 0 stopped, 1 the server could not start (e.g. its port is taken), 2 bad input (an
option, or openenv-core missing), 130 interrupted. Failures are one line on stderr; ``--verbose``
adds the traceback.
"""

from __future__ import annotations

import click
from pydantic import ValidationError

from agent.cli import EXIT_BAD_INPUT, boundary_group


def _error_of(exc: BaseException) -> tuple[int, str] | None:
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").startswith("openenv"):
        return EXIT_BAD_INPUT, "openenv-core is not installed: pip install 'maze-gateway[openenv]'"
    if isinstance(exc, ValidationError):
        return EXIT_BAD_INPUT, "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
    return None


@click.group(cls=boundary_group(_error_of), context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="show the traceback of a failure")
def main(verbose: bool) -> None:
    """The maze as an OpenEnv environment server."""


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="interface to listen on")
@click.option("--port", default=8010, show_default=True, type=int, help="TCP port (0: any free port)")
@click.option("--max-sessions", default=64, show_default=True, type=int,
              help="WebSocket sessions at once; one more is refused with CAPACITY_REACHED")
@click.option("--idle-timeout", "idle_timeout_s", default=300.0, show_default=True, type=float,
              help="seconds after which an idle session is closed and its slot freed")
def serve(host: str, port: int, max_sessions: int, idle_timeout_s: float) -> None:
    """Serve maze_2d/simple|easy|hard over OpenEnv's HTTP and WebSocket protocol until interrupted."""
    from maze_gateway.openenv_server import EnvServerConfig, bind
    from maze_gateway.openenv_server import serve as run_server

    cfg = EnvServerConfig(host=host, port=port, max_sessions=max_sessions, idle_timeout_s=idle_timeout_s)
    sock = bind(cfg)
    bound_host, bound_port = sock.getsockname()[:2]
    url = f"http://{bound_host}:{bound_port}"
    click.echo(f"maze-env: OpenEnv server on {url} (sessions: {url.replace('http', 'ws', 1)}/ws, "
               f"at most {cfg.max_sessions}; schema: {url}/schema)", err=True)
    run_server(cfg, sock)


if __name__ == "__main__":
    main()
