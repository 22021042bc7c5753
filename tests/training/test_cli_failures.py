"""maze-train's expected failures, run as the real command: one line on stderr, a documented exit
code, never a traceback (``--verbose`` shows one)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def maze_train(*args: str, env: dict[str, str] | None = None, verbose: bool = False) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    full_env.pop("RAY_ADDRESS", None)
    cmd = [sys.executable, "-m", "training.cli", *(["--verbose"] if verbose else []), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=180, check=False)


def assert_one_line(done: subprocess.CompletedProcess, code: int, *fragments: str) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr and len(lines) == 1 and lines[0].startswith("error: "), done.stderr[-2000:]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cluster_down():
    port = _closed_port()
    assert_one_line(maze_train("status", "--address", f"http://127.0.0.1:{port}", "some-job"), 3,
                    f"127.0.0.1:{port}")


def test_bad_spec(tmp_path):
    broken = tmp_path / "spec.yaml"
    broken.write_text("trainer: {epochs: [unclosed\n")
    assert_one_line(maze_train("render", str(broken)), 2, "invalid spec")
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text("no_such_field: 1\n")
    assert_one_line(maze_train("render", str(invalid)), 2, "no_such_field")


def test_missing_export_folder(tmp_path):
    missing = tmp_path / "no-such-export"
    done = maze_train("publish", "--export", str(missing), "--step", "3", "--name", "x")
    assert_one_line(done, 2, "no-such-export")


def test_s3_unreachable():
    env = {"AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{_closed_port()}", "AWS_ACCESS_KEY_ID": "x",
           "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1", "AWS_MAX_ATTEMPTS": "1"}
    assert_one_line(maze_train("checkpoints", "s3://maze-no-bucket/run", env=env), 3, "S3")


def test_no_permission():
    done = maze_train("dataset", "--out", "/sys/maze-no-permission", "--train-rows", "4", "--eval-rows", "2")
    assert_one_line(done, 2, "no permission", "/sys/maze-no-permission")
    verbose = maze_train("dataset", "--out", "/sys/maze-no-permission", "--train-rows", "4", "--eval-rows", "2",
                         verbose=True)
    assert verbose.returncode == 2 and "Traceback" in verbose.stderr
