"""Single-machine GRPO for the maze VLM: a LoRA adapter on the language model, reward 1/0.

Each step plays ``train_batch_size`` random mazes ``n_samples_per_prompt`` times each (multi-turn,
sampled at ``temperature``, the runner's protocol and history policy, :mod:`training.tiny.rollout`),
scores every episode 1.0 if it stopped on the goal else 0.0, and gives each turn of an episode
the group-relative advantage ``(r - mean_group) / (std_group + 1e-6)``. The policy loss is PPO's
clipped objective over the reply tokens (token mean), with LoRA (peft) on the text model's
q/k/v/o/gate/up/down projections only: the vision tower and the base weights stay frozen, which
is what vLLM can serve as a LoRA adapter. With ``state_groups`` each step adds groups rooted at
states its greedy episodes reached (:mod:`training.tiny.state_groups`): the advantage then lands on the
one reply that decided the outcome, not on every turn of an episode.

Settings and outputs follow SkyRL's vocabulary and layout:

* ``{ckpt_path}/global_step_N/`` with ``trainer_state.pt`` and ``policy/lora_adapter/`` +
  ``policy/optimizer.pt``; ``{ckpt_path}/latest_ckpt_global_step.txt`` is written last;
  ``resume_mode=latest`` continues from it (a missing marker starts from scratch);
* ``{export_path}/global_step_N/policy/adapter_model.safetensors`` + ``adapter_config.json``;
* ``{export_path}/dumped_evals/global_step_N_evals/aggregated_results.jsonl`` (``eval/all/pass_at_1``
  is the true greedy solve rate on seeds 0..eval_seeds-1) and ``eval_results.jsonl`` per episode.

Usage::

    python -m training.tiny.grpo_local --model-path models/maze-tiny --ckpt-path runs/grpo/ckpt \
        --export-path runs/grpo/export --device cuda
    python -m training.tiny.grpo_local ... --train-batch-size 2 --n-samples-per-prompt 2 --max-steps 2 \
        --max-turns 2 --eval-seeds 2 --device cpu                          # CPU smoke test
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent.mazes import MazeLayout, detour_moves, generate, generate_from_seed, shortest_path
from training.tiny.config_file import load_with_overrides
from training.tiny.demos import read_profile
from training.tiny.fastpath import FastQwen3VL, FrameBank, FrameCatalog, collate, make_codec
from training.tiny.lora import load_adapter_weights, lora_config, save_adapter
from training.tiny.perturbed_starts import perturbed_group
from training.tiny.rollout import Episode, RolloutSettings, Turn, new_episode, play, play_on
from training.tiny.schedules import Schedule, lr_factor
from training.tiny.state_groups import branches, pick_states, root_turns

log = logging.getLogger("training.tiny.grpo_local")

MARKER = "latest_ckpt_global_step.txt"


class GRPOConfig(BaseModel):
    """GRPO settings, named as in SkyRL where SkyRL has the setting."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="after")
    def _greedy_fits(self) -> GRPOConfig:
        if self.greedy_samples_per_prompt >= self.n_samples_per_prompt:
            raise ValueError("greedy_samples_per_prompt must be below n_samples_per_prompt (a group needs sampled members)")
        if self.state_groups and not self.greedy_samples_per_prompt:
            raise ValueError("state_groups roots its groups in greedy episodes: set greedy_samples_per_prompt >= 1")
        if self.state_groups and self.perturbed_starts:
            raise ValueError("state_groups and perturbed_starts cannot be combined (state groups root at turns "
                             "counted from the maze's start)")
        if self.hard_replay_fraction + self.perturbed_starts > 1:
            raise ValueError("hard_replay_fraction + perturbed_starts must be at most 1 (both are shares of train_batch_size)")
        return self

    model_path: str = Field(description="SFT base model folder (policy.model.path)")
    init_adapter: str | None = Field(
        None, description="adapter folder to start from instead of a zero LoRA (continues an earlier "
        "run's export on a fresh machine); ignored when resuming from a checkpoint")
    ckpt_path: str = Field(description="checkpoints (trainer.ckpt_path)")
    export_path: str = Field(description="adapter exports and dumped evals (trainer.export_path)")
    seed: int = Field(42)
    n_samples_per_prompt: int = Field(8, ge=2, description="episodes per maze (the GRPO group)")
    greedy_samples_per_prompt: int = Field(
        0, ge=0, description="members of each group decoded greedily (not a SkyRL setting), with the sampling "
        "distribution's log-probs: brings the states greedy evaluation reaches into the group")
    train_batch_size: int = Field(32, ge=1, description="mazes per step")
    state_groups: int = Field(
        0, ge=0, description="groups per step rooted at states of the step's greedy episodes, failed ones first "
        "(not a SkyRL setting, see training/tiny/state_groups.py): state_group_size replies sampled there, each played "
        "on greedily, the outcome's group advantage given to that one reply")
    state_group_size: int = Field(8, ge=2, description="sampled replies per state group")
    hard_replay_fraction: float = Field(
        0.0, ge=0, lt=1, description="share of each step's mazes replayed from recent ones whose group solved "
        "at most half (not a SkyRL setting). A maze that needs a detour away from the goal is failed by "
        "nearly every sample, so its group is all zeros and carries no advantage; replaying it gives "
        "exploration more tries. A maze is replayed at most twice, one that cannot be solved within max_turns "
        "never; the buffer is not checkpointed")
    detour_share: float = Field(
        0.0, ge=0, le=1, description="share of each step's fresh mazes drawn from those whose optimal path needs a "
        "detour away from the goal (not a SkyRL setting; rejection sampling, about 1 maze in 9 is one). They are "
        "the tasks a tuned adapter fails most (maze-grpo solves 62.5% of them, 93% of direct ones), so a plain batch "
        "holds few groups with any advantage on them; larger shares trade direct tasks for detour ones")
    perturbed_starts: float = Field(
        0.0, ge=0, le=1, description="share of each step's mazes whose group starts after 1..perturbed_max_moves "
        "forced random moves (not a SkyRL setting, see training/tiny/perturbed_starts.py): the states a wrong turn leads "
        "to, where greedy evaluation gets stuck, with the same turn limit and reward")
    perturbed_max_moves: int = Field(3, ge=1, description="most forced moves before a perturbed group's first turn")
    policy_mini_batch_size: int = Field(32, ge=1, description="mazes per optimizer step")
    micro_batch_size: int = Field(1024, ge=1, description="turn samples per forward/backward")
    update_epochs_per_batch: int = Field(1, ge=1)
    lr: float = Field(5e-4, gt=0)
    scheduler: Schedule = Field("constant", description="constant, or cosine from lr to 0 at max_steps "
                                "(trainer.policy.optimizer_config.scheduler in SkyRL, which names its own kinds)")
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    eps_clip_low: float = Field(0.2, ge=0)
    eps_clip_high: float = Field(0.2, ge=0)
    loss_reduction: str = Field(
        "sequence_mean", pattern="^(token_mean|sequence_mean|seq_mean_token_sum_norm)$",
        description="trainer.algorithm.loss_reduction; a sequence is a whole episode. token_mean lets the "
        "long failed episodes outweigh the short solved ones on shared format tokens (it collapsed the "
        "policy at lr 2e-3); sequence_mean weighs every episode once",
    )
    use_kl_loss: bool = Field(False, description="KL loss to the base model (adapter disabled), SkyRL's k3 estimator")
    kl_loss_coef: float = Field(0.001, ge=0)
    adam_eps: float = Field(1e-8, gt=0, description="AdamW eps; larger damps lr-sized steps on tiny, noisy gradients")
    max_turns: int = Field(15, ge=1)
    temperature: float = Field(1.0, gt=0)
    max_generate_length: int = Field(12, ge=1, description="reply tokens per turn")
    lora_rank: int = Field(32, ge=1, description="LoRA rank; an init_adapter of a lower rank is widened to it, "
                           "same function (the gateway serves ranks up to serving lora.max_rank)")
    lora_alpha: int = Field(32, ge=1)
    lora_vision: bool = Field(
        False, description="diagnostic only: LoRA on the vision tower too (vLLM serves LoRA on the language "
        "model only, so such an adapter cannot ship); tells whether the frozen tower caps the policy")
    max_steps: int = Field(200, ge=1, description="training steps (trainer.total_training_steps)")
    max_minutes: float = Field(30.0, gt=0, description="wall-clock budget; stops after the step in flight")
    eval_interval: int = Field(5, ge=1)
    eval_before_train: bool = Field(True)
    eval_seeds: int = Field(64, ge=1, description="eval set: seeds 0..N-1 of the env")
    eval_all_tasks: bool = Field(
        False, description="also play all 768 tasks of maze_2d/simple greedily at each eval (not a SkyRL setting): "
        "eval/all_tasks/pass_at_1 (and its detour part) is 12x the sample of the 64 seeds and not the set the "
        "adapter is picked on; 18-23 min on 2 CPU cores with the KV-cached rollout, 6-18 s (median 9 s) for the "
        "whole eval on one H200 shared by three runs")
    ckpt_interval: int = Field(10, ge=1)
    hf_save_interval: int = Field(10, ge=1, description="adapter export interval")
    resume_mode: str = Field("latest", pattern="^(latest|none)$")
    env_id: str = Field("maze_2d/simple")
    device: str = Field("cpu")


def build_policy(cfg: GRPOConfig, device: torch.device):
    from peft import get_peft_model
    from transformers import AutoProcessor, Qwen3VLForConditionalGeneration

    processor = AutoProcessor.from_pretrained(cfg.model_path)
    base = Qwen3VLForConditionalGeneration.from_pretrained(cfg.model_path, dtype=torch.float32)
    model = get_peft_model(base, lora_config(cfg.lora_rank, cfg.lora_alpha, cfg.lora_vision)).to(device)
    model.peft_config["default"].base_model_name_or_path = "maze-tiny"
    return model, processor


# -- GRPO pieces -------------------------------------------------------------------------------
class HardMazes:
    """Mazes whose group solved at most half, to play again (``hard_replay_fraction``).

    A maze is replayed at most ``max_replays`` times, and one that cannot be solved within
    ``max_turns`` (its optimal moves plus the stop) never enters, so unsolvable mazes cannot
    crowd the buffer.
    """

    def __init__(self, size: int, max_turns: int, max_replays: int = 2):
        self.queue: deque[tuple[MazeLayout, int]] = deque(maxlen=size)
        self.max_turns, self.max_replays = max_turns, max_replays

    def __len__(self) -> int:
        return len(self.queue)

    def take(self, n: int) -> list[tuple[MazeLayout, int]]:
        """Up to ``n`` oldest entries as (maze, times replayed once this play is counted)."""
        return [(lay, k + 1) for lay, k in (self.queue.popleft() for _ in range(min(n, len(self.queue))))]

    def offer(self, layouts: list[MazeLayout], replays: list[int], group_means: np.ndarray) -> None:
        for lay, k, g in zip(layouts, replays, group_means, strict=True):
            if g <= 0.5 and k < self.max_replays and len(shortest_path(lay.grid, lay.start, lay.goal)) < self.max_turns:
                self.queue.append((lay, k))


def fresh_mazes(n: int, detour_share: float, rng: np.random.Generator) -> list[MazeLayout]:
    """``n`` random 7x7 mazes, the first ``detour_share * n`` (rounded half up) of them ones that need a detour.

    With ``detour_share`` 0 this draws exactly what plain sampling draws, so runs without it are
    unchanged; the others are drawn by rejection from the same generator.
    """
    n_detour = int(detour_share * n + 0.5)
    out: list[MazeLayout] = []
    while len(out) < n_detour:
        lay = generate(7, 7, rng)
        if detour_moves(lay):
            out.append(lay)
    return out + [generate(7, 7, rng) for _ in range(n - n_detour)]


@contextmanager
def eval_mode(model) -> Iterator[None]:
    """The model in eval mode for a rollout, back in train mode afterwards (also on an error)."""
    model.eval()
    try:
        yield
    finally:
        model.train()


def flat_groups(rewards: np.ndarray, n: int) -> int:
    """Groups of ``n`` consecutive episodes with one reward throughout: zero advantage, no signal."""
    return int((rewards.reshape(-1, n).std(1) == 0).sum())


def group_advantages(rewards: np.ndarray, n: int) -> np.ndarray:
    """(r - group mean) / (group std + 1e-6); groups are consecutive runs of ``n`` episodes."""
    g = rewards.reshape(-1, n)
    return ((g - g.mean(1, keepdims=True)) / (g.std(1, keepdims=True) + 1e-6)).reshape(-1)


def loss_items(episodes: list[Episode], advantages: np.ndarray, cfg: GRPOConfig) -> list[tuple[Turn, float, float]]:
    """(turn, advantage, weight per token) for every turn with tokens of the episodes with a
    non-zero advantage; the weights sum to 1 over the tokens in ``token_mean`` and
    ``sequence_mean`` (SkyRL's loss reductions, one episode = one sequence)."""
    sized = ((e, float(a), sum(len(t.tokens) for t in e.turns)) for e, a in zip(episodes, advantages))
    kept = [(e, a, n) for e, a, n in sized if abs(a) > 1e-8 and n]
    if not kept:
        return []
    total = sum(n for _, _, n in kept)
    out = []
    for e, a, n in kept:
        if cfg.loss_reduction == "token_mean":
            w = 1.0 / total
        elif cfg.loss_reduction == "sequence_mean":
            w = 1.0 / (n * len(kept))
        else:  # seq_mean_token_sum_norm: a constant per-token weight
            w = 1.0 / (len(kept) * cfg.max_turns * cfg.max_generate_length)
        out.extend((t, a, w) for t in e.turns if t.tokens)
    return out


def minibatches(n_episodes: int, n_items: int, per_mini: int) -> list[np.ndarray]:
    """Indices of each optimizer step: the episodes in order, ``per_mini`` at a time (a maze's group
    stays together), with the state-group items after them (``n_episodes..n_items-1``) shared out
    evenly, so every update sees both kinds."""
    chunks = [np.arange(i, min(i + per_mini, n_episodes)) for i in range(0, n_episodes, per_mini)]
    extra = np.array_split(np.arange(n_episodes, n_items), len(chunks))
    return [np.concatenate([c, x]) for c, x in zip(chunks, extra, strict=True)]


def _token_logp(logits: torch.Tensor, tgt: torch.Tensor, banned: list[int], temperature: float) -> torch.Tensor:
    logits[:, banned] = float("-inf")  # the sampling distribution excluded them too
    return torch.log_softmax(logits / temperature, -1).gather(1, tgt[:, None]).squeeze(1)


def policy_loss(fast: FastQwen3VL, bank: FrameBank, items: list, cfg: GRPOConfig,
                device: torch.device, pad_id: int, banned: list[int]) -> dict:
    """Backward of the clipped surrogate over ``items`` (turn, advantage, token weight); returns
    stats (token-weighted means)."""
    stats = {"loss": 0.0, "clip_frac": 0.0, "ratio": 0.0, "kl": 0.0}
    wsum = sum(w * len(t.tokens) for t, _, w in items)
    for i in range(0, len(items), cfg.micro_batch_size):
        part = items[i : i + cfg.micro_batch_size]
        b = collate([t.prompt for t, _, _ in part], [t.frames for t, _, _ in part], [t.tokens for t, _, _ in part], pad_id=pad_id)
        b = {k: v.to(device, non_blocking=True) for k, v in b.items()}
        old = torch.as_tensor([lp for t, _, _ in part for lp in t.logprobs], device=device)
        adv = torch.as_tensor([a for t, a, _ in part for _ in t.tokens], device=device, dtype=torch.float32)
        wt = torch.as_tensor([w for t, _, w in part for _ in t.tokens], device=device, dtype=torch.float32)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            vis = fast.vision(b["frames"], bank)  # without lora_vision the tower is shared with the reference
            logits = fast.logits_at(fast.hidden(b["input_ids"], b["pos"], vis), b["tgt_index"])
            if cfg.use_kl_loss:
                with torch.no_grad(), fast.model.disable_adapter():
                    ref_vis = fast.vision(b["frames"], bank) if cfg.lora_vision else vis
                    ref_logits = fast.logits_at(fast.hidden(b["input_ids"], b["pos"], ref_vis), b["tgt_index"])
        logp = _token_logp(logits, b["tgt_ids"], banned, cfg.temperature)
        ratio = torch.exp(logp - old)
        clipped = ratio.clamp(1 - cfg.eps_clip_low, 1 + cfg.eps_clip_high)
        loss = -(torch.minimum(ratio * adv, clipped * adv) * wt).sum()
        if cfg.use_kl_loss:
            log_r = _token_logp(ref_logits, b["tgt_ids"], banned, cfg.temperature) - logp
            kl = torch.exp(log_r) - log_r - 1  # k3: unbiased, always >= 0
            loss = loss + cfg.kl_loss_coef * (kl * wt).sum()
            stats["kl"] += (kl.detach() * wt).sum().item() / wsum
        loss.backward()
        stats["loss"] += loss.item()
        stats["clip_frac"] += (((ratio - clipped).abs() > 1e-6).float() * wt).sum().item() / wsum
        stats["ratio"] += (ratio.detach() * wt).sum().item() / wsum
    return stats


def evaluate(fast, bank, codec, catalog, cfg: GRPOConfig, profile: dict, device) -> tuple[dict, list[dict]]:
    """Greedy pass@1 (true solve rate) on seeds 0..eval_seeds-1 (and on every task with ``eval_all_tasks``)."""
    settings = RolloutSettings(max_turns=cfg.max_turns, temperature=0.0, max_new_tokens=cfg.max_generate_length,
                               history=profile["history"], protocol=profile["protocol"])
    layouts = [generate_from_seed(7, 7, s) for s in range(cfg.eval_seeds)]
    tasks = catalog.tasks() if cfg.eval_all_tasks else []
    with eval_mode(fast.model):
        eps = play(fast, bank, codec, catalog, layouts, settings, device=device)
        task_eps = play(fast, bank, codec, catalog, tasks, settings, device=device) if tasks else []
    rows = [{"seed": s, "score": e.reward, "success": e.success, "turns": len(e.turns),
             "replies": [m["content"] for m in e.conversation if m["role"] == "assistant"]}
            for s, e in enumerate(eps)]
    rate = float(np.mean([e.success for e in eps]))
    metrics = {"eval/all/pass_at_1": rate, "eval/all/mean_positive_reward": rate,
               "eval/all/avg_turns": float(np.mean([len(e.turns) for e in eps]))}
    if tasks:
        solved = np.array([e.success for e in task_eps])
        detour = np.array([detour_moves(t) > 0 for t in tasks])
        metrics |= {"eval/all_tasks/pass_at_1": float(solved.mean()),
                    "eval/all_tasks/detour_pass_at_1": float(solved[detour].mean()) if detour.any() else None}
    return metrics, rows


def dump_eval(export: Path, step: int, metrics: dict, rows: list[dict]) -> None:
    d = export / "dumped_evals" / f"global_step_{step}_evals"
    d.mkdir(parents=True, exist_ok=True)
    (d / "aggregated_results.jsonl").write_text(json.dumps({"global_step": step, **metrics}) + "\n")
    (d / "eval_results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def save_checkpoint(cfg: GRPOConfig, model, opt, step: int, np_rng, history: list[dict]) -> None:
    root = Path(cfg.ckpt_path)
    d = root / f"global_step_{step}"
    save_adapter(model, d / "policy" / "lora_adapter", dtype=torch.float32)
    torch.save(opt.state_dict(), d / "policy" / "optimizer.pt")
    torch.save({"global_step": step, "np_rng": np_rng.bit_generator.state, "torch_rng": torch.get_rng_state(),
                "py_rng": random.getstate(), "history": history, "config": cfg.model_dump()}, d / "trainer_state.pt")
    (root / MARKER).write_text(str(step))  # the commit marker, written last


def try_resume(cfg: GRPOConfig, model, opt, np_rng) -> tuple[int, list[dict]]:
    marker = Path(cfg.ckpt_path) / MARKER
    if cfg.resume_mode != "latest" or not marker.exists():
        return 0, []
    step = int(marker.read_text().strip())
    d = Path(cfg.ckpt_path) / f"global_step_{step}"
    load_adapter_weights(model, d / "policy" / "lora_adapter")
    opt.load_state_dict(torch.load(d / "policy" / "optimizer.pt", map_location="cpu"))
    for group in opt.param_groups:  # the config's lr/eps win over the saved ones (resume with a new lr)
        group["lr"], group["eps"] = cfg.lr, cfg.adam_eps
    state = torch.load(d / "trainer_state.pt", weights_only=False)
    np_rng.bit_generator.state = state["np_rng"]
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["py_rng"])
    log.info("resumed from %s", d)
    return step, state["history"]


# -- main loop -------------------------------------------------------------------------------
def train(cfg: GRPOConfig) -> dict:
    device = torch.device(cfg.device)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    np_rng = np.random.default_rng(cfg.seed)
    export = Path(cfg.export_path)
    export.mkdir(parents=True, exist_ok=True)
    Path(cfg.ckpt_path).mkdir(parents=True, exist_ok=True)
    (export / "grpo_config.json").write_text(cfg.model_dump_json(indent=2) + "\n")
    profile = read_profile(cfg.model_path)
    model, processor = build_policy(cfg, device)
    model.train()
    catalog = FrameCatalog(7)
    bank = FrameBank(catalog, processor.image_processor, device, dtype=torch.bfloat16 if device.type == "cuda" else torch.float32)
    if device.type == "cuda":
        bank.fill()
    fast = FastQwen3VL(model, bank.grid_thw)
    codec = make_codec(processor)
    pad_id = processor.tokenizer.pad_token_id
    params = [p for p in model.parameters() if p.requires_grad]
    log.info("trainable %d params (LoRA r=%d)", sum(p.numel() for p in params), cfg.lora_rank)
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.999), eps=cfg.adam_eps)
    step, history = try_resume(cfg, model, opt, np_rng)
    if step == 0 and cfg.init_adapter:
        load_adapter_weights(model, Path(cfg.init_adapter))
        log.info("started from adapter %s", cfg.init_adapter)
    gen = torch.Generator(device=device).manual_seed(cfg.seed + step)
    settings = RolloutSettings(max_turns=cfg.max_turns, temperature=cfg.temperature, max_new_tokens=cfg.max_generate_length,
                               history=profile["history"], protocol=profile["protocol"])
    metrics_f = (export / "metrics.jsonl").open("a")
    hard = HardMazes(4 * cfg.train_batch_size, cfg.max_turns)
    t_start = time.perf_counter()

    def do_eval(s: int) -> dict:
        te = time.perf_counter()
        m, rows = evaluate(fast, bank, codec, catalog, cfg, profile, device)
        m["timing/eval_s"] = round(time.perf_counter() - te, 2)
        dump_eval(export, s, m, rows)
        return m

    if step == 0 and cfg.eval_before_train:
        m = do_eval(0)
        history.append({"global_step": 0, **m})
        log.info("Step 0: %s", json.dumps(m, indent=2))
        metrics_f.write(json.dumps({"global_step": 0, **m}) + "\n")
    while step < cfg.max_steps and time.perf_counter() - t_start < cfg.max_minutes * 60:
        step += 1
        t0 = time.perf_counter()
        for g in opt.param_groups:  # from the global step, so a resumed run keeps its place on the schedule
            g["lr"] = cfg.lr * lr_factor(step - 1, cfg.scheduler, 0, cfg.max_steps)
        replayed = hard.take(int(cfg.hard_replay_fraction * cfg.train_batch_size))
        n_replay = len(replayed)
        layouts = [lay for lay, _ in replayed] + fresh_mazes(cfg.train_batch_size - n_replay, cfg.detour_share, np_rng)
        replays = [k for _, k in replayed] + [0] * (cfg.train_batch_size - n_replay)
        # The last n_pert mazes start a few forced moves in; the rest at the start.
        n_pert = round(cfg.perturbed_starts * cfg.train_batch_size)
        n_start = cfg.train_batch_size - n_pert
        n, n_greedy = cfg.n_samples_per_prompt, cfg.greedy_samples_per_prompt
        group = [new_episode(lay, catalog, settings.protocol, greedy=i < n_greedy) for lay in layouts[:n_start] for i in range(n)]
        for lay in layouts[n_start:]:
            group += perturbed_group(lay, n, cfg.perturbed_max_moves, np_rng, catalog, settings.protocol, greedy=n_greedy)
        with eval_mode(model):
            eps: list[Episode] = play_on(fast, bank, codec, catalog, group, settings, generator=gen, device=device)
        t_roll = time.perf_counter() - t0
        rewards = np.array([e.reward for e in eps])
        adv = group_advantages(rewards, n)
        group_means = rewards.reshape(-1, n).mean(1)
        hard.offer(layouts[:n_start], replays[:n_start], group_means[:n_start])  # a perturbed group's mean is its state's
        m = {"batch/replayed": n_replay, "batch/hard_groups": int((group_means[:n_start] <= 0.5).sum()),
             "batch/detour_mazes": sum(detour_moves(lay) > 0 for lay in layouts),
             "batch/zero_adv_groups": flat_groups(rewards, n),
             "reward/mean": float(rewards.mean()), "episode/avg_turns": float(np.mean([len(e.turns) for e in eps])),
             "timing/rollout_s": round(t_roll, 2)}
        if cfg.greedy_samples_per_prompt:  # greedy on fresh random mazes: a less noisy view than the 64 eval seeds
            fresh = eps[n_replay * n : n_start * n]  # replayed hard mazes would bias it down; perturbed ones are not from the start
            m["reward/greedy_mean"] = float(np.mean([e.reward for e in fresh if e.greedy])) if fresh else None
        if n_pert:
            pert = rewards[n_start * n :]
            m |= {"batch/perturbed": n_pert, "reward/perturbed_mean": float(pert.mean()),
                  "batch/perturbed_zero_adv_groups": flat_groups(pert, n)}
        loss_eps, loss_adv = eps, adv
        if cfg.state_groups:
            tb = time.perf_counter()
            roots = pick_states(eps, cfg.state_groups, np_rng)
            with eval_mode(model):
                br = play_on(fast, bank, codec, catalog, branches(roots, cfg.state_group_size), settings,
                             generator=gen, device=device)
            br_rewards = np.array([e.reward for e in br])
            loss_eps = eps + root_turns(br)
            loss_adv = np.concatenate([adv, group_advantages(br_rewards, cfg.state_group_size)])
            m |= {"state_groups/roots": len(roots), "state_groups/failed_roots": sum(not e.success for e, _ in roots),
                  "state_groups/reward_mean": float(br_rewards.mean()) if len(br) else None,
                  "state_groups/zero_adv_groups": flat_groups(br_rewards, cfg.state_group_size),
                  "timing/state_groups_s": round(time.perf_counter() - tb, 2)}
        stats = {"loss": 0.0, "clip_frac": 0.0, "ratio": 0.0, "kl": 0.0}
        updates = 0
        for _ in range(cfg.update_epochs_per_batch):
            for part in minibatches(len(eps), len(loss_eps), cfg.policy_mini_batch_size * cfg.n_samples_per_prompt):
                items = loss_items([loss_eps[i] for i in part], loss_adv[part], cfg)
                if not items:
                    continue
                opt.zero_grad(set_to_none=True)
                s = policy_loss(fast, bank, items, cfg, device, pad_id, codec.banned_ids)
                gn = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
                if not torch.isfinite(gn):  # never let one bad batch poison the adapter
                    log.warning("step %d: non-finite grad norm, update skipped", step)
                    continue
                opt.step()
                updates += 1
                stats = {k: stats[k] + s[k] for k in stats}
                m["policy/grad_norm"] = float(gn)
        # Means over this step's optimizer updates (they were summed before, reading as ratio ~4).
        m |= {f"policy/{k}": round(v / max(updates, 1), 5) for k, v in stats.items()}
        m["policy/updates"] = updates
        m["policy/lr"] = opt.param_groups[0]["lr"]
        m["timing/step_s"] = round(time.perf_counter() - t0, 2)
        if step % cfg.eval_interval == 0:
            m |= do_eval(step)
        if step % cfg.hf_save_interval == 0:
            save_adapter(model, export / f"global_step_{step}" / "policy")
        if step % cfg.ckpt_interval == 0:
            save_checkpoint(cfg, model, opt, step, np_rng, history + [{"global_step": step, **m}])
        history.append({"global_step": step, **m})
        metrics_f.write(json.dumps({"global_step": step, **m}) + "\n")
        metrics_f.flush()
        log.info("Step %d: %s", step, json.dumps(m, indent=2))
    # Final eval, export and checkpoint at the last step (if not already done).
    last = history[-1] if history else {}
    if "eval/all/pass_at_1" not in last and step > 0:
        last |= do_eval(step)
    if not (export / f"global_step_{step}" / "policy" / "adapter_model.safetensors").exists():
        save_adapter(model, export / f"global_step_{step}" / "policy")
    if step > 0 and not (Path(cfg.ckpt_path) / f"global_step_{step}").exists():
        save_checkpoint(cfg, model, opt, step, np_rng, history)
    metrics_f.close()
    evals = [h for h in history if "eval/all/pass_at_1" in h]
    summary = {"global_step": step, "seconds": round(time.perf_counter() - t_start, 1), "evals": evals}
    (export / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--config", help="YAML/JSON GRPOConfig; flags override it")
    for name, field in GRPOConfig.model_fields.items():
        flag = "--" + name.replace("_", "-")
        if field.annotation is bool:
            parser.add_argument(flag, type=lambda v: v.lower() in ("1", "true", "yes"))
        else:
            parser.add_argument(flag, type=field.annotation if field.annotation in (int, float) else str)
    train(load_with_overrides(GRPOConfig, vars(parser.parse_args(argv))))


if __name__ == "__main__":
    main()
