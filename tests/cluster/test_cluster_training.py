"""A training job on a real multi-node Ray cluster loses its node and resumes elsewhere.

``maze-train submit --trainer local --resource maze_worker_1=1`` places the job on worker 1, with
its checkpoints in the cluster's shared folder (FSx /shared in production); worker 1 is killed
with SIGKILL once two checkpoints exist; the same spec resubmitted to worker 2 resumes from the
last checkpoint and finishes. The cluster here runs no gateway (nodes, S3 and the shared folder).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tests.cluster.conftest import start_cluster
from training.cli import main as train_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def nodes(maze_home):
    from serving.local import cluster

    _, state = start_cluster(app=False)
    try:
        yield state
    finally:
        cluster.down()


def tiny_spec(shared: Path, epochs: int) -> str:
    spec = {
        "name": "tiny-multinode",
        "env": {"max_turns": 3, "reward": "task"},
        "data": {"dir": str(shared / "data"), "train_rows": 2, "eval_rows": 2},
        "model": {"path": "models/maze-tiny", "lora": {"rank": 8, "alpha": 8}},
        "placement": {"num_nodes": 1, "gpus_per_node": 1},
        "inference": {"num_engines": 1},
        "optim": {"epochs": epochs, "train_batch_size": 2, "policy_mini_batch_size": 2, "n_samples_per_prompt": 2,
                  "lr": 1e-3},
        "output": {"ckpt_path": str(shared / "ckpt"), "export_path": str(shared / "export"), "ckpt_interval": 1,
                   "hf_save_interval": 1, "eval_interval": 1},
    }
    path = shared / f"spec-{epochs}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def run(*args: str):
    return CliRunner().invoke(train_cli, list(args))


def marker(shared: Path) -> int:
    p = shared / "ckpt" / "latest_ckpt_global_step.txt"
    return int(p.read_text().strip()) if p.exists() else 0


def driver_worker(state, submission_id: str) -> int | None:
    """The worker node the job's driver runs on."""
    from ray.job_submission import JobSubmissionClient

    from serving.local.cluster import worker_of

    node_id = JobSubmissionClient(state.dashboard_url).get_job_info(submission_id).driver_node_id
    return worker_of(state.dashboard_url, node_id)


def test_job_resumes_from_shared_checkpoint_after_node_loss(nodes):
    from serving.local import cluster

    state, shared = nodes, Path(nodes.shared_dir)
    address = state.dashboard_url
    sub = run("submit", "--address", address, "--trainer", "local", "--resource", "maze_worker_1=1",
              tiny_spec(shared, epochs=40))
    assert sub.exit_code == 0, sub.output
    first = sub.stdout.strip()
    deadline = time.monotonic() + 300
    while marker(shared) < 2 and time.monotonic() < deadline:
        status = json.loads(run("status", "--address", address, first, "--json").stdout)["status"]
        assert status in ("PENDING", "RUNNING"), run("logs", "--address", address, first).output[-3000:]
        time.sleep(0.5)
    assert marker(shared) >= 2, run("logs", "--address", address, first).output[-3000:]
    assert driver_worker(state, first) == 1

    cluster.kill_worker(1)
    killed_at = marker(shared)
    deadline = time.monotonic() + 90
    status = ""
    while time.monotonic() < deadline:  # the head notices the lost node (health checks) and fails the job
        status = json.loads(run("status", "--address", address, first, "--json").stdout)["status"]
        if status == "FAILED":
            break
        time.sleep(1)
    assert status == "FAILED"
    stopped_at = marker(shared)
    assert stopped_at == killed_at  # nothing wrote checkpoints after the node was gone

    target = stopped_at + 2
    sub = run("submit", "--address", address, "--trainer", "local", "--resource", "maze_worker_2=1",
              tiny_spec(shared, epochs=target))
    assert sub.exit_code == 0, sub.output
    second = sub.stdout.strip()
    follow = run("logs", "--address", address, second, "--follow")
    assert follow.exit_code == 0, follow.output[-3000:]
    assert driver_worker(state, second) == 2
    assert f"resumed from {shared / 'ckpt'}/global_step_{stopped_at}" in follow.output
    assert f"Step {target}:" in follow.output and "Step 1:" not in follow.output
    assert marker(shared) == target
    assert (shared / "export" / f"global_step_{target}" / "policy" / "adapter_model.safetensors").is_file()

