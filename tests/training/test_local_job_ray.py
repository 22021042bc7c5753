"""maze-train against a real local Ray cluster: submit --trainer local, follow, stop, resume, sync."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from evaluation.store import Store
from tests.support.ray_cluster import local_ray_cluster
from training.cli import main as cli

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.needs_ray]


@pytest.fixture(scope="module")
def ray_address():
    if not (ROOT / "models" / "maze-tiny" / "model.safetensors").exists():
        pytest.fail("models/maze-tiny is missing (it ships in the repo)")
    with local_ray_cluster(num_cpus=2) as address:
        yield address


def tiny_spec(tmp: Path, epochs: int) -> str:
    spec = {
        "name": "tiny-local",
        "env": {"max_turns": 3, "reward": "task"},
        "data": {"dir": str(tmp / "data"), "train_rows": 2, "eval_rows": 2},
        "model": {"path": "models/maze-tiny", "lora": {"rank": 8, "alpha": 8}},
        "placement": {"num_nodes": 1, "gpus_per_node": 1},
        "inference": {"num_engines": 1},
        "optim": {"epochs": epochs, "train_batch_size": 2, "policy_mini_batch_size": 2, "n_samples_per_prompt": 2,
                  "lr": 1e-3},
        "output": {"ckpt_path": str(tmp / "ckpt"), "export_path": str(tmp / "export"), "ckpt_interval": 1,
                   "hf_save_interval": 1, "eval_interval": 1},
    }
    path = tmp / f"spec-{epochs}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def run(*args, **kw):
    result = CliRunner().invoke(cli, list(args), **kw)
    return result


def marker(tmp: Path) -> int:
    p = tmp / "ckpt" / "latest_ckpt_global_step.txt"
    return int(p.read_text().strip()) if p.exists() else 0


def test_submit_follow_stop_resume_sync(ray_address, tmp_path):
    db = str(tmp_path / "curves.sqlite")
    # A long job, stopped once it has checkpointed twice.
    sub = run("submit", "--address", ray_address, "--trainer", "local", tiny_spec(tmp_path, epochs=40))
    assert sub.exit_code == 0, sub.output
    first = sub.stdout.strip()
    deadline = time.monotonic() + 240
    while marker(tmp_path) < 2 and time.monotonic() < deadline:
        status = json.loads(run("status", "--address", ray_address, first, "--json").stdout)["status"]
        assert status in ("PENDING", "RUNNING"), run("logs", "--address", ray_address, first).stdout[-3000:]
        time.sleep(0.5)
    assert marker(tmp_path) >= 2, run("logs", "--address", ray_address, first).output[-3000:]
    assert run("stop", "--address", ray_address, first).exit_code == 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = json.loads(run("status", "--address", ray_address, first, "--json").stdout)["status"]
        if status == "STOPPED":
            break
        time.sleep(0.5)
    assert status == "STOPPED"
    stopped_at = marker(tmp_path)

    # Resubmitting the spec (now asking for two more steps) resumes from the latest checkpoint.
    target = stopped_at + 2
    sub = run("submit", "--address", ray_address, "--trainer", "local", tiny_spec(tmp_path, epochs=target))
    second = sub.stdout.strip()
    follow = run("logs", "--address", ray_address, second, "--follow", "--db", db)
    assert follow.exit_code == 0, follow.output[-3000:]
    assert f"resumed from {tmp_path / 'ckpt'}/global_step_{stopped_at}" in follow.output
    assert f"Step {target}:" in follow.output and "Step 1:" not in follow.output
    assert marker(tmp_path) == target

    # Curve points landed in the store while following; checkpoints and exports exist.
    points = Store(db).curve(second)
    assert {p["step"] for p in points if p["metric"] == "eval/all/pass_at_1"} >= {target}
    steps = json.loads(run("checkpoints", str(tmp_path / "export"), "--json").stdout)
    assert [s["step"] for s in steps][-1] == target and steps[-1]["pass_at_1"] is not None
    assert (tmp_path / "export" / f"global_step_{target}" / "policy" / "adapter_model.safetensors").exists()

    # sync imports the stopped job's logged steps too, without duplicating existing points.
    synced = run("sync", "--address", ray_address, first, "--db", db)
    assert synced.exit_code == 0 and "new curve points" in synced.stdout
    again = run("sync", "--address", ray_address, first, "--db", db)
    assert again.stdout.startswith("0 new curve points")


def test_unknown_job_and_bad_address(ray_address):
    assert run("status", "--address", ray_address, "no-such-job").exit_code == 2
    assert run("status", "--address", "http://127.0.0.1:9", "x").exit_code == 3


def test_submit_console_is_quiet(ray_address, tmp_path):
    """The real command prints the job id and nothing else: Ray's packaging chatter only with --verbose."""
    from tests.support.cli import run_cli

    done = run_cli("training.cli", "submit", "--address", ray_address, "--trainer", "local", tiny_spec(tmp_path, epochs=1),
                   env={"RAY_ADDRESS": None}, timeout=120)
    assert done.returncode == 0 and done.stderr.strip() == "", done.stderr[-2000:]
    (job,) = done.stdout.split()
    assert job.startswith("maze-local-")
    run("stop", "--address", ray_address, job)


def test_what_git_ignores_stays_out_of_the_upload_and_an_oversized_one_says_what_to_do(ray_address, tmp_path):
    """A 101 MiB folder that only ``.git/info/exclude`` ignores (Ray reads .gitignore files alone) is
    left out of the job's package; the same folder not ignored is over the dashboard's upload limit,
    and the refusal says how to keep it out."""
    import os
    import subprocess

    from training.errors import JobError
    from training.jobs import JobClient, new_submission_id

    repo = tmp_path / "repo"
    (repo / "weights").mkdir(parents=True)
    (repo / "weights" / "blob.bin").write_bytes(os.urandom(101 * 2**20))  # random: zip cannot shrink it
    (repo / "train.py").write_text("print('ok')\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".git" / "info" / "exclude").write_text("/weights/\n")
    client = JobClient(ray_address)
    job = client.submit("python train.py", submission_id=new_submission_id("local"), working_dir=repo)
    deadline = time.monotonic() + 120
    while (status := client.info(job).status) not in ("SUCCEEDED", "FAILED", "STOPPED") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert status == "SUCCEEDED" and "ok" in client.logs(job), client.logs(job)[-2000:]

    (repo / ".git" / "info" / "exclude").write_text("")
    with pytest.raises(JobError, match="Maximum request body size") as refused:
        client.submit("python train.py", submission_id=new_submission_id("local"), working_dir=repo)
    assert "keep large files out of it with .gitignore or .rayignore" in str(refused.value)
