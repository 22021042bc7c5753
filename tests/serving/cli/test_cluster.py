"""maze-serve cluster's expected failures without a cluster, run as the real command: one line on
stderr, a documented exit code, never a traceback."""

from __future__ import annotations

from tests.support.cli import assert_one_line
from tests.serving.cli.test_failures import maze_serve, write_config


def test_cluster_status_when_not_running(tmp_path):
    done = maze_serve("cluster", "status", home=tmp_path)
    assert done.returncode == 1 and done.stdout.strip() == "not running" and "Traceback" not in done.stderr


def test_kill_and_restart_without_a_cluster(tmp_path):
    assert_one_line(maze_serve("cluster", "kill", "1", home=tmp_path), 1, "no local cluster running")
    assert_one_line(maze_serve("cluster", "restart", "1", home=tmp_path), 1, "no local cluster running")


def test_down_without_a_cluster(tmp_path):
    done = maze_serve("cluster", "down", home=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "not running"


def test_up_refuses_direct_ingress(tmp_path):
    cfg = write_config(tmp_path)  # the embedded config: ingress direct, one replica
    done = maze_serve("-c", str(cfg), "cluster", "up", home=tmp_path)
    assert_one_line(done, 1, "ingress 'proxy'")
