"""Single-machine GRPO for the maze VLM: a LoRA adapter on the language model, reward 1/0.

Each step plays ``train_batch_size`` random mazes ``n_samples_per_prompt`` times each (multi-turn,
sampled at ``temperature``, the runner's protocol and history policy,
:mod:`training.tiny.fastpath.rollout`), scores every episode 1.0 if it stopped on the goal else 0.0,
and gives each turn of an episode the group-relative advantage
``(r - mean_group) / (std_group + 1e-6)``. The policy loss is PPO's clipped objective over the
reply tokens (token mean; :mod:`training.tiny.trainers.grpo_loss`), with LoRA (peft) on the text
model's q/k/v/o/gate/up/down projections only: the vision tower and the base weights stay frozen,
which is what vLLM can serve as a LoRA adapter. With ``state_groups`` each step adds groups rooted
at states its greedy episodes reached (:mod:`training.tiny.data.state_groups`): the advantage then
lands on the one reply that decided the outcome, not on every turn of an episode.

Settings and outputs follow SkyRL's vocabulary and layout:

* ``{ckpt_path}/global_step_N/`` with ``trainer_state.pt`` and ``policy/lora_adapter/`` +
  ``policy/optimizer.pt``; ``{ckpt_path}/latest_ckpt_global_step.txt`` is written last;
  ``resume_mode=latest`` continues from it (a missing marker starts from scratch;
  :mod:`training.tiny.trainers.checkpointing`);
* ``{export_path}/global_step_N/policy/adapter_model.safetensors`` + ``adapter_config.json``;
* ``{export_path}/dumped_evals/global_step_N_evals/aggregated_results.jsonl`` (``eval/all/pass_at_1``
  is the true greedy solve rate on seeds 0..eval_seeds-1) and ``eval_results.jsonl`` per episode.

Usage::

    python -m training.tiny.trainers.grpo --model-path models/maze-tiny --ckpt-path runs/grpo/ckpt \
        --export-path runs/grpo/export --device cuda
    python -m training.tiny.trainers.grpo ... --train-batch-size 2 --n-samples-per-prompt 2 --max-steps 2 \
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agent.maze import MazeLayout, Pos, detour_moves, generate, generate_from_seed, shortest_path
from training.tiny.data import branches, perturbed_group, pick_states, read_profile, root_turns
from training.tiny.fastpath import (
    Episode,
    FastQwen3VL,
    FrameBank,
    FrameCatalog,
    PromptCodec,
    RolloutSettings,
    make_codec,
    new_episode,
    play,
    play_on,
)
from training.tiny.model import load_adapter_weights, lora_config, save_adapter
from training.tiny.trainers.checkpointing import save_checkpoint, try_resume
from training.tiny.trainers.config_file import load_with_overrides
from training.tiny.trainers.grpo_config import GRPOConfig
from training.tiny.trainers.grpo_loss import flat_groups, group_advantages, loss_items, minibatches, policy_loss
from training.tiny.trainers.schedules import lr_factor

log = logging.getLogger("training.tiny.trainers.grpo")


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


def maze_key(layout: MazeLayout) -> tuple[bytes, Pos, Pos]:
    """What makes two mazes the same task: the walls, the start and the goal."""
    return layout.grid.tobytes(), tuple(map(int, layout.start)), tuple(map(int, layout.goal))


def held_out_keys(seeds: int) -> frozenset:
    """The tasks of env seeds ``0..seeds-1`` (seeds 0..63 are the fixed set the served curve scores)."""
    return frozenset(maze_key(generate_from_seed(7, 7, s)) for s in range(seeds))


def fresh_mazes(n: int, detour_share: float, rng: np.random.Generator, held_out=frozenset()) -> list[MazeLayout]:
    """``n`` random 7x7 mazes, the first ``detour_share * n`` (rounded half up) of them ones that need a detour.

    With ``detour_share`` 0 and nothing ``held_out`` this draws exactly what plain sampling draws, so
    runs without them are unchanged; the others are drawn by rejection from the same generator (a
    7x7 maze is one of 768 tasks, so a random draw hits the 64 eval seeds' tasks about 8% of the time).
    """

    def draw(ok) -> MazeLayout:
        while True:
            lay = generate(7, 7, rng)
            if maze_key(lay) not in held_out and ok(lay):
                return lay

    n_detour = int(detour_share * n + 0.5)
    return [draw(detour_moves) for _ in range(n_detour)] + [draw(lambda _lay: True) for _ in range(n - n_detour)]


@contextmanager
def eval_mode(model) -> Iterator[None]:
    """The model in eval mode for a rollout, back in train mode afterwards (also on an error)."""
    model.eval()
    try:
        yield
    finally:
        model.train()


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


# -- main loop -------------------------------------------------------------------------------
@dataclass
class GRPORun:
    """What a run carries from step to step: the policy on the fast path, its optimizer, the RNGs."""

    cfg: GRPOConfig
    device: torch.device
    model: Any
    fast: FastQwen3VL
    bank: FrameBank
    codec: PromptCodec
    catalog: FrameCatalog
    profile: dict
    settings: RolloutSettings
    params: list[torch.nn.Parameter]
    opt: torch.optim.Optimizer
    np_rng: np.random.Generator
    gen: torch.Generator
    hard: HardMazes
    held_out: frozenset
    export: Path
    pad_id: int


def start_run(cfg: GRPOConfig) -> tuple[GRPORun, int, list[dict]]:
    """Seed everything, build the policy and its optimizer, resume (or start from ``init_adapter``):
    the run, the step it is at and the metrics history so far."""
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
    params = [p for p in model.parameters() if p.requires_grad]
    log.info("trainable %d params (LoRA r=%d)", sum(p.numel() for p in params), cfg.lora_rank)
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.999), eps=cfg.adam_eps)
    step, history = try_resume(cfg, model, opt, np_rng)
    if step == 0 and cfg.init_adapter:
        load_adapter_weights(model, Path(cfg.init_adapter))
        log.info("started from adapter %s", cfg.init_adapter)
    settings = RolloutSettings(max_turns=cfg.max_turns, temperature=cfg.temperature, max_new_tokens=cfg.max_generate_length,
                               history=profile["history"], protocol=profile["protocol"])
    run = GRPORun(cfg=cfg, device=device, model=model, fast=FastQwen3VL(model, bank.grid_thw), bank=bank,
                  codec=make_codec(processor), catalog=catalog, profile=profile, settings=settings, params=params,
                  opt=opt, np_rng=np_rng, gen=torch.Generator(device=device).manual_seed(cfg.seed + step),
                  hard=HardMazes(4 * cfg.train_batch_size, cfg.max_turns), held_out=held_out_keys(cfg.held_out_seeds),
                  export=export, pad_id=processor.tokenizer.pad_token_id)
    return run, step, history


def run_eval(run: GRPORun, step: int) -> dict:
    """The greedy evaluation at ``step``, timed and dumped in SkyRL's layout; its metrics."""
    te = time.perf_counter()
    m, rows = evaluate(run.fast, run.bank, run.codec, run.catalog, run.cfg, run.profile, run.device)
    m["timing/eval_s"] = round(time.perf_counter() - te, 2)
    dump_eval(run.export, step, m, rows)
    return m


@dataclass
class Batch:
    """One step's mazes and episodes: replayed hard mazes first, then fresh ones; the last
    ``n_pert`` mazes start a few forced moves in (``n_start`` = the ones played from the start)."""

    layouts: list[MazeLayout]
    replays: list[int]
    n_replay: int
    n_start: int
    n_pert: int
    episodes: list[Episode]


def draw_batch(run: GRPORun) -> Batch:
    """The step's mazes (hard replays, then fresh ones) and their groups' unplayed episodes."""
    cfg, n, n_greedy = run.cfg, run.cfg.n_samples_per_prompt, run.cfg.greedy_samples_per_prompt
    replayed = run.hard.take(int(cfg.hard_replay_fraction * cfg.train_batch_size))
    n_replay = len(replayed)
    fresh = fresh_mazes(cfg.train_batch_size - n_replay, cfg.detour_share, run.np_rng, run.held_out)
    layouts = [lay for lay, _ in replayed] + fresh
    replays = [k for _, k in replayed] + [0] * (cfg.train_batch_size - n_replay)
    n_pert = round(cfg.perturbed_starts * cfg.train_batch_size)
    n_start = cfg.train_batch_size - n_pert
    protocol = run.settings.protocol
    group = [new_episode(lay, run.catalog, protocol, greedy=i < n_greedy) for lay in layouts[:n_start] for i in range(n)]
    for lay in layouts[n_start:]:
        group += perturbed_group(lay, n, cfg.perturbed_max_moves, run.np_rng, run.catalog, protocol, greedy=n_greedy)
    return Batch(layouts, replays, n_replay, n_start, n_pert, group)


def play_batch(run: GRPORun, batch: Batch) -> tuple[list[Episode], np.ndarray, dict]:
    """Play the batch's groups: the episodes, their group advantages and the batch's metrics
    (hard mazes are offered to the replay buffer here)."""
    cfg, n = run.cfg, run.cfg.n_samples_per_prompt
    t0 = time.perf_counter()
    with eval_mode(run.model):
        eps = play_on(run.fast, run.bank, run.codec, run.catalog, batch.episodes, run.settings, generator=run.gen,
                      device=run.device)
    t_roll = time.perf_counter() - t0
    rewards = np.array([e.reward for e in eps])
    group_means = rewards.reshape(-1, n).mean(1)
    n_start = batch.n_start
    run.hard.offer(batch.layouts[:n_start], batch.replays[:n_start], group_means[:n_start])  # a perturbed group's mean is its state's
    m = {"batch/replayed": batch.n_replay, "batch/hard_groups": int((group_means[:n_start] <= 0.5).sum()),
         "batch/detour_mazes": sum(detour_moves(lay) > 0 for lay in batch.layouts),
         "batch/zero_adv_groups": flat_groups(rewards, n),
         "reward/mean": float(rewards.mean()), "episode/avg_turns": float(np.mean([len(e.turns) for e in eps])),
         "timing/rollout_s": round(t_roll, 2)}
    if cfg.greedy_samples_per_prompt:  # greedy on fresh random mazes: a less noisy view than the 64 eval seeds
        fresh = eps[batch.n_replay * n : n_start * n]  # replayed hard mazes would bias it down; perturbed ones are not from the start
        m["reward/greedy_mean"] = float(np.mean([e.reward for e in fresh if e.greedy])) if fresh else None
    if batch.n_pert:
        pert = rewards[n_start * n :]
        m |= {"batch/perturbed": batch.n_pert, "reward/perturbed_mean": float(pert.mean()),
              "batch/perturbed_zero_adv_groups": flat_groups(pert, n)}
    return eps, group_advantages(rewards, n), m


def add_state_groups(run: GRPORun, eps: list[Episode], adv: np.ndarray, m: dict) -> tuple[list[Episode], np.ndarray]:
    """The loss's episodes and advantages: ``eps`` and, with ``state_groups``, the root turns of
    groups sampled at states of the greedy episodes (their metrics go into ``m``)."""
    cfg = run.cfg
    if not cfg.state_groups:
        return eps, adv
    tb = time.perf_counter()
    roots = pick_states(eps, cfg.state_groups, run.np_rng)
    with eval_mode(run.model):
        br = play_on(run.fast, run.bank, run.codec, run.catalog, branches(roots, cfg.state_group_size), run.settings,
                     generator=run.gen, device=run.device)
    br_rewards = np.array([e.reward for e in br])
    m |= {"state_groups/roots": len(roots), "state_groups/failed_roots": sum(not e.success for e, _ in roots),
          "state_groups/reward_mean": float(br_rewards.mean()) if len(br) else None,
          "state_groups/zero_adv_groups": flat_groups(br_rewards, cfg.state_group_size),
          "timing/state_groups_s": round(time.perf_counter() - tb, 2)}
    return eps + root_turns(br), np.concatenate([adv, group_advantages(br_rewards, cfg.state_group_size)])


def update_policy(run: GRPORun, step: int, n_episodes: int, loss_eps: list[Episode], loss_adv: np.ndarray) -> dict:
    """``update_epochs_per_batch`` passes of optimizer steps over the loss items; the policy's
    metrics (means over the updates made; a non-finite gradient skips its update)."""
    cfg = run.cfg
    stats = {"loss": 0.0, "clip_frac": 0.0, "ratio": 0.0, "kl": 0.0}
    m: dict = {}
    updates = 0
    for _ in range(cfg.update_epochs_per_batch):
        for part in minibatches(n_episodes, len(loss_eps), cfg.policy_mini_batch_size * cfg.n_samples_per_prompt):
            items = loss_items([loss_eps[i] for i in part], loss_adv[part], cfg)
            if not items:
                continue
            run.opt.zero_grad(set_to_none=True)
            s = policy_loss(run.fast, run.bank, items, cfg, run.device, run.pad_id, run.codec.banned_ids)
            gn = torch.nn.utils.clip_grad_norm_(run.params, cfg.max_grad_norm)
            if not torch.isfinite(gn):  # never let one bad batch poison the adapter
                log.warning("step %d: non-finite grad norm, update skipped", step)
                continue
            run.opt.step()
            updates += 1
            stats = {k: stats[k] + s[k] for k in stats}
            m["policy/grad_norm"] = float(gn)
    m |= {f"policy/{k}": round(v / max(updates, 1), 5) for k, v in stats.items()}
    m["policy/updates"] = updates
    m["policy/lr"] = run.opt.param_groups[0]["lr"]
    return m


def grpo_step(run: GRPORun, step: int) -> dict:
    """One training step (``step`` counts from 1): rollouts, advantages, policy updates; its metrics."""
    cfg = run.cfg
    t0 = time.perf_counter()
    for g in run.opt.param_groups:  # from the global step, so a resumed run keeps its place on the schedule
        g["lr"] = cfg.lr * lr_factor(step - 1, cfg.scheduler, 0, cfg.max_steps)
    batch = draw_batch(run)
    eps, adv, m = play_batch(run, batch)
    loss_eps, loss_adv = add_state_groups(run, eps, adv, m)
    m |= update_policy(run, step, len(eps), loss_eps, loss_adv)
    m["timing/step_s"] = round(time.perf_counter() - t0, 2)
    return m


def save_outputs(run: GRPORun, step: int, m: dict, history: list[dict]) -> None:
    """The step's scheduled evaluation (into ``m``), adapter export and checkpoint."""
    cfg = run.cfg
    if step % cfg.eval_interval == 0:
        m |= run_eval(run, step)
    if step % cfg.hf_save_interval == 0:
        save_adapter(run.model, run.export / f"global_step_{step}" / "policy")
    if step % cfg.ckpt_interval == 0:
        save_checkpoint(cfg, run.model, run.opt, step, run.np_rng, history + [{"global_step": step, **m}])


def finish(run: GRPORun, step: int, history: list[dict]) -> None:
    """Evaluation, export and checkpoint at the last step, each unless the step already has it."""
    last = history[-1] if history else {}
    if "eval/all/pass_at_1" not in last and step > 0:
        last |= run_eval(run, step)
    if not (run.export / f"global_step_{step}" / "policy" / "adapter_model.safetensors").exists():
        save_adapter(run.model, run.export / f"global_step_{step}" / "policy")
    if step > 0 and not (Path(run.cfg.ckpt_path) / f"global_step_{step}").exists():
        save_checkpoint(run.cfg, run.model, run.opt, step, run.np_rng, history)


def train(cfg: GRPOConfig) -> dict:
    """Run GRPO until ``max_steps`` or ``max_minutes``; returns a summary (steps, seconds, evals)."""
    run, step, history = start_run(cfg)
    t_start = time.perf_counter()
    with (run.export / "metrics.jsonl").open("a") as metrics_f:
        if step == 0 and cfg.eval_before_train:
            m = run_eval(run, 0)
            save_adapter(run.model, run.export / "global_step_0" / "policy")  # the served curve's starting point
            history.append({"global_step": 0, **m})
            log.info("Step 0: %s", json.dumps(m, indent=2))
            metrics_f.write(json.dumps({"global_step": 0, **m}) + "\n")
        while step < cfg.max_steps and time.perf_counter() - t_start < cfg.max_minutes * 60:
            step += 1
            m = grpo_step(run, step)
            save_outputs(run, step, m, history)
            history.append({"global_step": step, **m})
            metrics_f.write(json.dumps({"global_step": step, **m}) + "\n")
            metrics_f.flush()
            log.info("Step %d: %s", step, json.dumps(m, indent=2))
        finish(run, step, history)
    evals = [h for h in history if "eval/all/pass_at_1" in h]
    summary = {"global_step": step, "seconds": round(time.perf_counter() - t_start, 1), "evals": evals}
    (run.export / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
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
