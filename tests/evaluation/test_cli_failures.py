"""maze-eval's expected failures, run as the real command: one line on stderr, a documented exit
code, never a traceback (``--verbose`` shows one)."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from agent.cli import EXIT_BAD_INPUT, EXIT_UNAVAILABLE
from serving.config import ServingConfig
from tests.support.cli import assert_json_error, assert_one_line, closed_port, run_cli


def maze_eval(*args: str, home: Path, verbose: bool = False) -> subprocess.CompletedProcess:
    env = {"MAZE_HOME": str(home), "MAZE_DB": str(home / "results.db")}
    return run_cli("evaluation.cli", *args, env=env, verbose=verbose)


def test_endpoint_down(tmp_path):
    port = closed_port()
    assert_one_line(maze_eval("--endpoint", f"http://127.0.0.1:{port}/v1", "--seeds", "0-1", home=tmp_path),
                    EXIT_UNAVAILABLE, f"127.0.0.1:{port}")


def test_embedded_gateway_port_taken(tmp_path):
    """No --endpoint: the embedded gateway cannot start on a taken port, and nothing else is started."""
    port = ServingConfig.shipped("embedded").port
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", port))
        holder.listen()
    except OSError:  # taken by something else already: the same failure
        holder.close()
        holder = None
    try:
        done = maze_eval("--seeds", "0-1", home=tmp_path)
    finally:
        if holder is not None:
            holder.close()
    assert_one_line(done, EXIT_UNAVAILABLE, "embedded gateway", f"port {port}", "taken")
    assert not (tmp_path / "embedded" / "state.json").exists()


def test_unknown_run(tmp_path):
    assert_one_line(maze_eval("report", "no-such-run", home=tmp_path), EXIT_BAD_INPUT, "no-such-run")
    assert_one_line(maze_eval("--resume", "no-such-run", "--endpoint", "http://127.0.0.1:9/v1", home=tmp_path),
                    EXIT_BAD_INPUT, "no-such-run")


@pytest.mark.parametrize(("args", "fragment"), [
    (("--seeds", "abc"), "seeds"),
    (("--db", "nosuchdialect://x/y", "leaderboard"), "results database URL"),
])
def test_bad_config(tmp_path, args, fragment):
    assert_one_line(maze_eval(*args, home=tmp_path), EXIT_BAD_INPUT, fragment)


def test_no_permission(tmp_path):
    done = maze_eval("--db", "/sys/maze-no-permission/results.db", "leaderboard", home=tmp_path)
    assert_one_line(done, EXIT_BAD_INPUT, "no permission", "/sys/maze-no-permission")


def test_verbose_shows_the_traceback(tmp_path):
    done = maze_eval("--db", "/sys/maze-no-permission/results.db", "leaderboard", home=tmp_path, verbose=True)
    assert done.returncode == EXIT_BAD_INPUT and "Traceback" in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: no permission")


def test_json_commands_fail_as_json(tmp_path):
    """A subcommand's own --json makes its failure JSON on stdout, like the group's --json does."""
    assert_json_error(maze_eval("compare", "no-a", "no-b", "--json", home=tmp_path), EXIT_BAD_INPUT, "no-a")
    assert_json_error(maze_eval("--db", "nosuchdialect://x/y", "leaderboard", "--json", home=tmp_path),
                      EXIT_BAD_INPUT, "results database URL")
