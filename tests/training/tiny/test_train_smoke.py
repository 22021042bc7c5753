"""CPU smoke runs: a few SFT steps and GRPO steps end to end, with checkpoints, exports and resume."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from agent.maze import detour_moves, generate, generate_from_seed
from training.tiny.data import read_profile
from training.tiny.fastpath import (
    FastQwen3VL,
    FrameBank,
    FrameCatalog,
    RolloutSettings,
    make_codec,
    new_episode,
    play,
    play_on,
)
from training.tiny.trainers import GRPOConfig, SFTConfig, build_policy
from training.tiny.trainers.checkpointing import MARKER
from training.tiny.trainers.grpo import fresh_mazes
from training.tiny.trainers.grpo import train as grpo_train
from training.tiny.trainers.grpo_loss import loss_items, policy_loss
from training.tiny.trainers.sft import train as sft_train

TINY = Path(__file__).resolve().parents[3] / "models" / "maze-tiny"
pytestmark = pytest.mark.slow


def test_sft_smoke(tmp_path):
    kw = {"init_dir": str(TINY), "batch_size": 4, "eval_every": 1, "eval_every_near": 1, "eval_seeds": 1,
          "eval_max_turns": 2, "num_workers": 0, "log_every": 1, "band": (0.0, 1.0), "confirm_with_runner": False,
          "stop_above_band": False}
    summary = sft_train(SFTConfig(out_dir=str(tmp_path / "sft"), max_steps=2, select="last", **kw))
    assert summary["steps"] == 2
    metrics = [json.loads(x) for x in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert {m["kind"] for m in metrics} == {"train", "eval"}
    # band (0, 1): both evaluated checkpoints are saved; select=last takes the later one
    assert [s["step"] for s in summary["saved"]] == [1, 2]
    sel = tmp_path / "sft" / "selected"
    assert (sel / "model.safetensors").is_file() and (sel / "agent_profile.json").is_file()
    assert json.loads((sel / "training_meta.json").read_text())["step"] == 2
    # stop_rate 0: the first evaluation reaches it, so the run stops there
    assert sft_train(SFTConfig(out_dir=str(tmp_path / "stop"), max_steps=5, stop_rate=0.0, **kw))["steps"] == 1


def test_sft_lora_probe_on_a_cosine_schedule(tmp_path):
    """lora_rank trains only a LoRA on the text model (vision tower untouched) and saves merged,
    plain weights; the cosine schedule reaches 0 at max_steps."""
    kw = {"init_dir": str(TINY), "batch_size": 4, "eval_every": 10, "eval_seeds": 1, "eval_max_turns": 2,
          "num_workers": 0, "log_every": 1, "confirm_with_runner": False, "stop_above_band": False}
    sft_train(SFTConfig(out_dir=str(tmp_path / "sft"), max_steps=3, warmup_steps=1, lr=5e-2, lr_schedule="cosine",
                        lora_rank=4, **kw))
    rows = [json.loads(x) for x in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert [r["lr"] for r in rows if r["kind"] == "train"] == pytest.approx([5e-2, 2.5e-2, 0.0])
    with safe_open(str(TINY / "model.safetensors"), "pt") as a, \
            safe_open(str(tmp_path / "sft" / "last" / "model.safetensors"), "pt") as b:
        assert set(a.keys()) == set(b.keys())  # merged: no LoRA or peft names
        changed = {k for k in a.keys() if not torch.equal(a.get_tensor(k), b.get_tensor(k))}  # noqa: SIM118 - safe_open is not iterable
    assert changed and all(".language_model." in k and k.endswith("proj.weight") for k in changed)


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
    start = tmp_path / "export" / "global_step_0" / "policy"  # exported with the step-0 eval: a served curve's start
    with safe_open(str(start / "adapter_model.safetensors"), "pt") as f:
        lora_b = [k for k in f.keys() if "lora_B" in k]
        assert lora_b and not any(f.get_tensor(k).any() for k in lora_b)  # the zero LoRA training starts from
    summary = grpo_train(GRPOConfig(max_steps=2, eval_before_train=False, **kw))  # resumes at step 1
    assert summary["global_step"] == 2
    assert (tmp_path / "ckpt" / MARKER).read_text() == "2"
    assert (tmp_path / "ckpt" / "global_step_2" / "trainer_state.pt").is_file()



def test_grpo_kl_loss_is_zero_on_the_base_and_positive_off_it():
    """The KL-to-base term: the reference is the same model with the adapter disabled, so it is 0
    for a fresh (zero) adapter and > 0 once the adapter moves the policy."""
    cfg = GRPOConfig(model_path=str(TINY), ckpt_path="c", export_path="e", max_turns=2, max_generate_length=8,
                     temperature=1.0, use_kl_loss=True, kl_loss_coef=0.1)
    device = torch.device("cpu")
    model, processor = build_policy(cfg, device)
    bank = FrameBank(FrameCatalog(7), processor.image_processor, device, dtype=torch.float32)
    fast, codec, profile = FastQwen3VL(model, bank.grid_thw), make_codec(processor), read_profile(TINY)
    settings = RolloutSettings(max_turns=2, temperature=1.0, max_new_tokens=8, history=profile["history"],
                               protocol=profile["protocol"])
    model.eval()
    eps = play(fast, bank, codec, bank.catalog, [generate_from_seed(7, 7, 0)] * 2, settings,
               generator=torch.Generator().manual_seed(0), device=device)
    items = loss_items(eps, np.array([1.0, -1.0]), cfg)
    assert items
    pad = processor.tokenizer.pad_token_id
    at_base = policy_loss(fast, bank, items, cfg, device, pad, codec.banned_ids)
    assert at_base["kl"] == pytest.approx(0.0, abs=1e-6)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.5, generator=gen)
    moved = policy_loss(fast, bank, items, cfg, device, pad, codec.banned_ids)["kl"]
    assert moved > 1e-4



def test_greedy_member_of_a_sampled_group_replays_the_greedy_episode():
    """A group's greedy member takes the argmax at every turn while its neighbours sample, and its
    log-probs are those of the sampling distribution (what the PPO ratio is taken against)."""
    device = torch.device("cpu")
    cfg = GRPOConfig(model_path=str(TINY), ckpt_path="c", export_path="e")
    model, processor = build_policy(cfg, device)
    model.eval()
    bank = FrameBank(FrameCatalog(7), processor.image_processor, device, dtype=torch.float32)
    fast, codec, profile = FastQwen3VL(model, bank.grid_thw), make_codec(processor), read_profile(TINY)
    layouts = [generate_from_seed(7, 7, s) for s in (3, 3, 5)]

    def run(temperature: float, greedy=None):
        settings = RolloutSettings(max_turns=4, temperature=temperature, max_new_tokens=8,
                                   history=profile["history"], protocol=profile["protocol"])
        gen = torch.Generator().manual_seed(0)
        if greedy is None:
            return play(fast, bank, codec, bank.catalog, layouts, settings, generator=gen, device=device)
        # as the GRPO trainer builds a group: episodes flagged greedy, played with play_on
        eps = [new_episode(lay, bank.catalog, settings.protocol, greedy=g) for lay, g in zip(layouts, greedy, strict=True)]
        return play_on(fast, bank, codec, bank.catalog, eps, settings, generator=gen, device=device)

    pure = run(0.0)
    mixed = run(3.0, greedy=[True, False, True])
    for g, p in ((mixed[0], pure[0]), (mixed[2], pure[2])):
        assert g.greedy and g.conversation == p.conversation
        # same tokens, but log-probs at T=3 are flatter than the T=1 ones greedy decoding records
        assert [t.tokens for t in g.turns] == [t.tokens for t in p.turns]
        assert sum(map(sum, (t.logprobs for t in g.turns))) < sum(map(sum, (t.logprobs for t in p.turns)))
    assert not mixed[1].greedy
    assert [t.tokens for t in mixed[1].turns] != [t.tokens for t in pure[1].turns]  # T=3 wanders off


def test_grpo_config_needs_a_sampled_member_per_group():
    with pytest.raises(ValueError, match="greedy_samples_per_prompt"):
        GRPOConfig(model_path="m", ckpt_path="c", export_path="e", n_samples_per_prompt=2, greedy_samples_per_prompt=2)


def test_grpo_logs_replays_and_group_stats(tmp_path):
    """hard_replay_fraction end to end: every step logs what it replayed and its group stats."""
    cfg = GRPOConfig(model_path=str(TINY), ckpt_path=str(tmp_path / "ckpt"), export_path=str(tmp_path / "export"),
                     train_batch_size=2, n_samples_per_prompt=2, policy_mini_batch_size=2, max_turns=9,
                     max_generate_length=8, eval_before_train=False, eval_interval=10, eval_seeds=2, max_steps=2,
                     hard_replay_fraction=0.5, greedy_samples_per_prompt=1)
    grpo_train(cfg)
    rows = [json.loads(x) for x in (tmp_path / "export" / "metrics.jsonl").read_text().splitlines()]
    first, second = (r for r in rows if "batch/replayed" in r)
    assert first["batch/replayed"] == 0
    assert second["batch/replayed"] == min(1, first["batch/hard_groups"])  # paths of 8 fit in 9 turns
    assert all(0 <= r["batch/zero_adv_groups"] <= 2 and 0 <= r["reward/greedy_mean"] <= 1 for r in (first, second))


def test_fresh_mazes_puts_detour_mazes_first_at_the_share_asked():
    def key(m):
        return m.grid.tobytes(), m.start, m.goal

    # share 0 draws what plain sampling draws, so runs without the option keep their mazes
    rng_a, rng_b = np.random.default_rng(5), np.random.default_rng(5)
    assert [key(m) for m in fresh_mazes(12, 0.0, rng_a)] == [key(generate(7, 7, rng_b)) for _ in range(12)]
    mazes = fresh_mazes(16, 0.5, np.random.default_rng(7))
    assert len(mazes) == 16 and all(detour_moves(m) > 0 for m in mazes[:8])
    # about 1 random maze in 9 needs a detour, so without the share few do
    assert sum(detour_moves(m) > 0 for m in fresh_mazes(400, 0.0, np.random.default_rng(8))) < 100


def test_fresh_mazes_never_draw_a_held_out_task():
    from training.tiny.trainers.grpo import held_out_keys, maze_key

    held = held_out_keys(64)
    assert len(held) == 60  # seeds 0..63 draw 60 of the 768 tasks
    plain = fresh_mazes(400, 0.0, np.random.default_rng(9))
    assert sum(maze_key(m) in held for m in plain) > 10  # about 8% of random draws are eval tasks
    kept = fresh_mazes(400, 0.25, np.random.default_rng(9), held)
    assert not any(maze_key(m) in held for m in kept) and all(detour_moves(m) > 0 for m in kept[:100])


def test_grpo_eval_all_tasks_logs_the_task_rate(tmp_path, monkeypatch):
    """eval_all_tasks adds the all-task metrics next to the eval seeds' (here on the first 6 of the
    768 tasks: all of them take minutes on CPU); detour_share 1 trains on a detour maze."""
    from training.tiny.fastpath import FrameCatalog

    every = FrameCatalog.tasks
    monkeypatch.setattr(FrameCatalog, "tasks", lambda self: every(self)[:6])
    cfg = GRPOConfig(model_path=str(TINY), ckpt_path=str(tmp_path / "ckpt"), export_path=str(tmp_path / "export"),
                     train_batch_size=1, n_samples_per_prompt=2, policy_mini_batch_size=1, max_turns=2,
                     max_generate_length=8, eval_seeds=1, max_steps=1, eval_all_tasks=True, detour_share=1.0)
    summary = grpo_train(cfg)
    step = next(json.loads(x) for x in (tmp_path / "export" / "metrics.jsonl").read_text().splitlines()
                if '"batch/detour_mazes"' in x)
    assert step["batch/detour_mazes"] == 1
    for ev in summary["evals"]:  # before training and after the step
        assert 0.0 <= ev["eval/all_tasks/pass_at_1"] <= 1.0 and "eval/all_tasks/detour_pass_at_1" in ev
    assert [ev["global_step"] for ev in summary["evals"]] == [0, 1]


@pytest.mark.parametrize("rank,alpha", [(128, 128), (128, 64)])
def test_a_lower_rank_adapter_is_widened_without_changing_the_policy(rank, alpha):
    """--init-adapter of the shipped adapter into a wider LoRA: same logits, and the new
    directions can train (A's new rows are random, B's new columns zero)."""
    from training.tiny.model import load_adapter_weights

    adapter = TINY.parent / "maze-grpo"
    shipped = json.loads((adapter / "adapter_config.json").read_text())
    r0 = shipped["r"]
    assert r0 < rank
    ids = torch.randint(0, 200, (1, 24), generator=torch.Generator().manual_seed(0))
    logits = []
    for r, a in ((r0, shipped["lora_alpha"]), (rank, alpha)):
        cfg = GRPOConfig(model_path=str(TINY), ckpt_path="c", export_path="e", lora_rank=r, lora_alpha=a)
        model, _ = build_policy(cfg, torch.device("cpu"))
        load_adapter_weights(model, adapter)
        model.eval()
        with torch.no_grad():
            logits.append(model(input_ids=ids).logits)
    wide = dict(model.named_parameters())
    a_name = next(n for n in wide if "lora_A" in n)
    assert wide[a_name].shape[0] == rank and wide[a_name][r0:].abs().sum() > 0
    assert wide[a_name.replace("lora_A", "lora_B")][:, r0:].abs().sum() == 0
    assert torch.allclose(logits[0], logits[1], atol=1e-4)
    # and the adapter does move the base: this comparison could fail
    with model.disable_adapter(), torch.no_grad():
        assert not torch.allclose(model(input_ids=ids).logits, logits[1], atol=1e-3)


def test_a_higher_rank_adapter_is_refused_by_name(tmp_path):
    from training.tiny.model import load_adapter_weights

    cfg = GRPOConfig(model_path=str(TINY), ckpt_path="c", export_path="e", lora_rank=16, lora_alpha=16)
    model, _ = build_policy(cfg, torch.device("cpu"))
    with pytest.raises(ValueError, match="lora_A.*cannot be widened"):
        load_adapter_weights(model, TINY.parent / "maze-grpo")
