"""Picking the best export of GRPO runs and packing the picks for the trip back from the device."""

from __future__ import annotations

import json
import os
import tarfile

from training.tiny.trainers import TASKS_METRIC
from training.tiny.trainers.grpo_select import main, pack, pick


def _run(root, name: str, rates: dict[int, float], ckpt_bytes: int):
    run = root / name
    export = run / "export"
    export.mkdir(parents=True)
    rows = [{"global_step": s, "eval/all/pass_at_1": r} for s, r in rates.items()]
    (export / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for s in rates:
        policy = export / f"global_step_{s}" / "policy"
        policy.mkdir(parents=True)
        (policy / "adapter_model.safetensors").write_bytes(b"w%d" % s)
    last = max(rates)
    ck = run / "ckpt" / f"global_step_{last}" / "policy"
    ck.mkdir(parents=True)
    (ck / "optimizer.pt").write_bytes(os.urandom(ckpt_bytes))  # incompressible, like optimizer state
    (run / "ckpt" / "latest_ckpt_global_step.txt").write_text(str(last))
    return run


def test_select_takes_the_best_eval_later_step_on_ties_and_pack_drops_oversized_checkpoints(tmp_path):
    small = _run(tmp_path / "runs", "grpo_small", {0: 0.5, 5: 0.8, 10: 0.8}, ckpt_bytes=1000)
    big = _run(tmp_path / "runs", "grpo_big", {0: 0.5, 5: 0.6}, ckpt_bytes=300_000)
    main(str(tmp_path / "pick"), [str(small), str(big)])
    picks = {p["run"]: p["global_step"] for p in json.loads((tmp_path / "pick" / "picks.json").read_text())}
    assert picks == {"grpo_small": 10, "grpo_big": 5}
    assert (tmp_path / "pick" / "grpo_small" / "adapter" / "adapter_model.safetensors").read_bytes() == b"w10"

    fitted = pack(tmp_path / "pick", tmp_path / "out", max_bytes=100_000)
    assert fitted == {"grpo_big": False, "grpo_small": True}
    assert (tmp_path / "out" / "picks.json").is_file()
    for name, with_ckpt in fitted.items():
        archive = tmp_path / "out" / f"pick_{name}.tgz"
        assert archive.stat().st_size <= 100_000
        with tarfile.open(archive) as tar:
            names = tar.getnames()
        assert f"{name}/adapter/adapter_model.safetensors" in names and f"{name}/metrics.jsonl" in names
        assert any("/ckpt/" in n for n in names) == with_ckpt


def test_select_by_all_tasks_can_pick_another_step_than_the_eval_seeds(tmp_path):
    run = _run(tmp_path / "runs", "grpo_t", {5: 0.9, 10: 0.8}, ckpt_bytes=10)
    rows = [{"global_step": 5, "eval/all/pass_at_1": 0.9, "eval/all_tasks/pass_at_1": 0.70},
            {"global_step": 10, "eval/all/pass_at_1": 0.8, "eval/all_tasks/pass_at_1": 0.75}]
    (run / "export" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert pick(run)["global_step"] == 5
    by_tasks = pick(run, TASKS_METRIC)
    assert (by_tasks["global_step"], by_tasks["pass_at_1"], by_tasks["all_tasks_pass_at_1"]) == (10, 0.8, 0.75)
    assert by_tasks["picked_by"] == TASKS_METRIC
