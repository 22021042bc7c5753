"""CPU smoke runs: a few SFT steps and GRPO steps end to end, with checkpoints, exports and resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors import safe_open

import training  # noqa: F401 - makes torchvision importable on CPU torch
from training.grpo_local import MARKER, GRPOConfig
from training.grpo_local import train as grpo_train
from training.sft import SFTConfig
from training.sft import train as sft_train

TINY = Path(__file__).resolve().parents[2] / "models" / "maze-tiny"
pytestmark = pytest.mark.slow


def test_sft_smoke(tmp_path):
    cfg = SFTConfig(init_dir=str(TINY), out_dir=str(tmp_path / "sft"), batch_size=4, max_steps=2, eval_every=2,
                    eval_seeds=1, eval_max_turns=2, num_workers=0, log_every=1, band=(0.0, 1.0),
                    confirm_with_runner=False, stop_above_band=False)
    summary = sft_train(cfg)
    assert summary["steps"] == 2
    metrics = [json.loads(x) for x in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert {m["kind"] for m in metrics} == {"train", "eval"}
    sel = tmp_path / "sft" / "selected"  # band (0, 1): the eval checkpoint is saved and selected
    assert (sel / "model.safetensors").is_file() and (sel / "agent_profile.json").is_file()


def test_grpo_smoke_and_resume(tmp_path):
    kw = {"model_path": str(TINY), "ckpt_path": str(tmp_path / "ckpt"), "export_path": str(tmp_path / "export"),
          "train_batch_size": 1, "n_samples_per_prompt": 2, "policy_mini_batch_size": 1, "max_turns": 2,
          "eval_seeds": 1, "eval_interval": 1, "ckpt_interval": 1, "hf_save_interval": 1, "max_generate_length": 8}
    grpo_train(GRPOConfig(max_steps=1, **kw))
    assert (tmp_path / "ckpt" / MARKER).read_text() == "1"
    policy = tmp_path / "export" / "global_step_1" / "policy"
    assert (policy / "adapter_config.json").is_file()
    with safe_open(str(policy / "adapter_model.safetensors"), "pt") as f:
        assert f.keys()
    agg = tmp_path / "export" / "dumped_evals" / "global_step_1_evals" / "aggregated_results.jsonl"
    assert 0.0 <= json.loads(agg.read_text())["eval/all/pass_at_1"] <= 1.0
    summary = grpo_train(GRPOConfig(max_steps=2, eval_before_train=False, **kw))  # resumes at step 1
    assert summary["global_step"] == 2
    assert (tmp_path / "ckpt" / MARKER).read_text() == "2"
    assert (tmp_path / "ckpt" / "global_step_2" / "trainer_state.pt").is_file()


def test_grpo_kl_loss_and_adam_eps_run(tmp_path):
    """The KL-to-base option runs end to end (reference = the same model with the adapter off)."""
    kw = {"model_path": str(TINY), "ckpt_path": str(tmp_path / "ckpt"), "export_path": str(tmp_path / "export"),
          "train_batch_size": 2, "n_samples_per_prompt": 4, "policy_mini_batch_size": 2, "max_turns": 3,
          "eval_seeds": 1, "eval_interval": 1, "temperature": 3.0, "max_generate_length": 8,
          "use_kl_loss": True, "kl_loss_coef": 0.1, "adam_eps": 1e-6, "eval_before_train": False}
    grpo_train(GRPOConfig(max_steps=1, **kw))
    (row,) = [json.loads(x) for x in (tmp_path / "export" / "metrics.jsonl").read_text().splitlines()]
    assert row["policy/kl"] >= 0.0 and row["policy/updates"] >= 0
