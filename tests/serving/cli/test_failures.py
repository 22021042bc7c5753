"""maze-serve's expected failures, run as the real command: one line on stderr, a documented exit
code, never a traceback (``--verbose`` shows one)."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import yaml

from serving.config import ServingConfig
from serving.local import free_port
from tests.support.cli import assert_json_error, assert_one_line, run_cli


def maze_serve(*args: str, home: Path, verbose: bool = False) -> subprocess.CompletedProcess:
    return run_cli("serving.cli", *args, env={"MAZE_HOME": str(home)}, verbose=verbose)


def write_config(tmp_path: Path, **changes) -> Path:
    """The embedded config on free ports (S3 included), with ``changes`` applied at the top level."""
    d = ServingConfig.shipped("embedded").model_dump(mode="json")
    d["port"] = free_port()
    d["adapters"]["endpoint_url"] = f"http://127.0.0.1:{free_port()}"
    for key, value in changes.items():
        if isinstance(value, dict):
            d[key].update(value)
        else:
            d[key] = value
    path = tmp_path / "serving.yaml"
    path.write_text(yaml.safe_dump(d))
    return path


def test_status_when_not_running(tmp_path):
    done = maze_serve("status", home=tmp_path)
    assert done.returncode == 1 and done.stdout.strip() == "not running" and "Traceback" not in done.stderr


def test_up_on_a_taken_port(tmp_path):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        done = maze_serve("-c", str(write_config(tmp_path, port=port)), "up", home=tmp_path)
    finally:
        holder.close()
    assert_one_line(done, 1, f"port {port}", "taken")
    assert not (tmp_path / "embedded" / "state.json").exists()


def test_bad_config(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    assert_one_line(maze_serve("-c", str(broken), "adapters", "list", home=tmp_path), 2, "bad serving config")
    invalid = write_config(tmp_path, port=0)
    assert_one_line(maze_serve("-c", str(invalid), "adapters", "list", home=tmp_path), 2, "bad serving config", "port")
    assert_one_line(maze_serve("-c", "no-such-config", "adapters", "list", home=tmp_path), 2, "no-such-config")


def test_s3_unreachable(tmp_path):
    cfg = write_config(tmp_path)  # its S3 endpoint is a free port: nothing listens there
    assert_one_line(maze_serve("-c", str(cfg), "adapters", "list", home=tmp_path), 3, "S3")
    # With the command's --json the same failure is JSON on stdout.
    assert_json_error(maze_serve("-c", str(cfg), "adapters", "list", "--json", home=tmp_path), 3, "S3")


def test_unknown_adapter(tmp_path, s3_server):
    cfg = write_config(tmp_path, adapters={"endpoint_url": s3_server.url, "prefix": "s3://maze-cli-failures/a"})
    from serving.adapters import AdapterStore

    AdapterStore(ServingConfig.from_file(cfg).adapters).ensure_bucket()
    assert_one_line(maze_serve("-c", str(cfg), "adapters", "rm", "no-such-adapter", home=tmp_path), 4,
                    "no-such-adapter")


def test_no_permission(tmp_path):
    """MAZE_HOME where nothing may be written: one line, exit 2, nothing started."""
    cfg = write_config(tmp_path)
    done = maze_serve("-c", str(cfg), "up", home=Path("/sys/maze-no-permission"))
    assert_one_line(done, 2, "no permission", "/sys/maze-no-permission")
    verbose = maze_serve("-c", str(cfg), "up", home=Path("/sys/maze-no-permission"), verbose=True)
    assert verbose.returncode == 2 and "Traceback" in verbose.stderr
