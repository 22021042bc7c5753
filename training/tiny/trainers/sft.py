"""Supervised training of the maze VLM on solver demonstrations (the SFT base, ``maze-tiny``).

Demonstrations (:mod:`training.tiny.data.demos`) are drawn on the fly in DataLoader workers as token ids
and frame ids; the batched forward of :mod:`training.tiny.fastpath` trains the whole model (vision
tower included). Every ``eval_every`` steps the closed-loop greedy solve rate on the fixed seeds
is measured with the fast batched rollout; when that rate is in the target band the checkpoint
is saved as a complete model folder (optionally after re-measuring it through the real runner
with an HF policy, :mod:`training.tiny.policies.hf`, and only if that rate is in the band too). The run
stops at ``stop_rate`` (the take-off) or when it leaves the band upwards; the in-band checkpoint
closest to ``target_rate``, or the last one saved (``select: last``, the rising edge of the
take-off: the shipped base), is copied to ``{out_dir}/selected``.

Usage::

    python -m training.tiny.trainers.sft --out runs/sft --device cuda            # the real run (one H200)
    python -m training.tiny.trainers.sft --out /tmp/sft --max-steps 3 --batch-size 8 --eval-every 2 \
        --eval-seeds 2 --num-workers 0                            # CPU smoke run
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from training.tiny.data import DemoConfig, demo_stream, write_profile
from training.tiny.fastpath import FastQwen3VL, FrameBank, FrameCatalog, PromptCodec, collate, frame_rows, make_codec
from training.tiny.model import lora_config
from training.tiny.trainers.config_file import load_with_overrides
from training.tiny.trainers.schedules import Schedule, lr_factor

log = logging.getLogger("training.tiny.trainers.sft")


class SFTConfig(BaseModel):
    """Everything that determines an SFT run (with the seed, it is reproducible)."""

    model_config = ConfigDict(extra="forbid")

    init_dir: str = Field(description="model folder to start from (training.tiny.model.builder output)")
    out_dir: str = Field(description="where metrics, checkpoints and the selected model go")
    seed: int = Field(0, description="seeds data, init order and sampling")
    demo: DemoConfig = Field(default_factory=DemoConfig, description="demonstration settings")
    batch_size: int = Field(512, ge=1, description="samples (turns) per optimizer step")
    lr: float = Field(1e-3, gt=0, description="peak AdamW learning rate")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")
    warmup_steps: int = Field(100, ge=0, description="steps of linear warm-up from 0 to lr")
    lr_schedule: Schedule = Field("constant", description="after warm-up: constant, or cosine to 0 at max_steps")
    lora_rank: int | None = Field(
        None, ge=1, description="train only a LoRA of this rank on the text model's projections (the GRPO adapter's "
        "parameterization, alpha = rank), not every weight: a probe of what that adapter can learn from labels; "
        "saved folders hold the merged weights")
    lora_vision: bool = Field(False, description="with lora_rank, a LoRA on the vision tower too (a diagnostic: "
                              "vLLM serves LoRA on the language model only)")
    grad_clip: float = Field(1.0, gt=0, description="gradient norm clip per optimizer step")
    max_steps: int = Field(4000, ge=1, description="optimizer steps of this run (a resumed run counts its own)")
    max_minutes: float = Field(8.0, gt=0, description="wall-clock budget for the training loop")
    log_every: int = Field(20, ge=1, description="steps between train records (loss, accuracies, lr) in metrics.jsonl")
    eval_every: int = Field(100, ge=1, description="steps between closed-loop evaluations")
    eval_every_near: int = Field(25, ge=1, description="eval interval once the rate passes near_rate")
    near_rate: float = Field(0.15, description="solve rate from which evaluation gets denser")
    eval_seeds: int = Field(64, ge=1, description="evaluate on seeds 0..N-1")
    eval_max_turns: int = Field(15, ge=1, description="turn limit of the evaluation episodes (the eval limit of "
                                "maze_2d/simple)")
    band: tuple[float, float] = Field((0.35, 0.55), description="solve-rate band for the SFT base")
    target_rate: float = Field(0.4375, description="pick the in-band checkpoint closest to this")
    stop_above_band: bool = Field(True, description="stop once the runner-measured rate is above the band")
    stop_rate: float | None = Field(
        None, description="stop once the fast greedy rate reaches this (the take-off); None: stop_above_band decides")
    select: Literal["closest", "last"] = Field(
        "closest", description="in-band checkpoint to select: closest to target_rate, or the last one saved "
        "(with stop_rate, the one on the rising edge of the take-off)")
    confirm_with_runner: bool = Field(True, description="re-measure in-band checkpoints with the real runner")
    resume: bool = Field(False, description="continue from {out_dir}/last_state.pt if present")
    num_workers: int = Field(8, ge=0, description="DataLoader workers drawing demonstrations (0: in the training "
                             "process)")
    device: str = Field("cpu", description="torch device: cpu, cuda or cuda:N")

    @model_validator(mode="after")
    def _vision_needs_rank(self) -> SFTConfig:
        if self.lora_vision and not self.lora_rank:
            raise ValueError("lora_vision adds the vision tower to the LoRA probe: set lora_rank too")
        return self


# -- data ------------------------------------------------------------------------------------
class DemoBatches(torch.utils.data.IterableDataset):
    """Endless collated batches of demonstration samples (whole episodes, so frames repeat)."""

    def __init__(self, cfg: SFTConfig):
        self.cfg = cfg

    def __iter__(self):
        from transformers import AutoProcessor

        info = torch.utils.data.get_worker_info()
        wid = info.id if info is not None else 0
        cfg = self.cfg
        processor = AutoProcessor.from_pretrained(cfg.init_dir)
        catalog = FrameCatalog(7)
        codec = make_codec(processor)
        stream = demo_stream(cfg.demo, catalog, seed=cfg.seed * 1000 + wid)
        pad = processor.tokenizer.pad_token_id
        while True:
            samples = []
            while len(samples) < cfg.batch_size:
                samples.extend(next(stream))
            samples = samples[: cfg.batch_size]
            yield collate([codec.encode(s.messages) for s in samples], [frame_rows(s.messages) for s in samples],
                          [codec.reply_ids(s.target) for s in samples], pad_id=pad)


# -- steps -----------------------------------------------------------------------------------
def sft_loss(fast: FastQwen3VL, bank: FrameBank, batch: dict, device: torch.device) -> tuple[torch.Tensor, dict]:
    """Cross-entropy on the reply tokens, with token and whole-reply accuracy."""
    b = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        h = fast.hidden(b["input_ids"], b["pos"], fast.vision(b["frames"], bank))
        logits = fast.logits_at(h, b["tgt_index"])
    loss = torch.nn.functional.cross_entropy(logits, b["tgt_ids"])
    with torch.no_grad():
        wrong = (logits.argmax(-1) != b["tgt_ids"]).float()
        per = torch.zeros(b["input_ids"].shape[0], device=device).index_add_(0, b["tgt_sample"], wrong)
        stats = {"token_acc": 1 - wrong.mean(), "action_acc": (per == 0).float().mean()}
    return loss, stats


def save_model_folder(model, init_dir: str | Path, out: str | Path, meta: dict) -> Path:
    """A complete, loadable model folder (bf16 weights, processor, tokenizer, agent profile)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for f in Path(init_dir).iterdir():
        if f.is_file() and not f.name.endswith(".safetensors") and f.name not in ("config.json",):
            shutil.copy2(f, out / f.name)
    bf16 = copy.deepcopy(model)
    if hasattr(bf16, "merge_and_unload"):  # a LoRA probe (lora_rank): save plain weights
        bf16 = bf16.merge_and_unload()
    bf16 = bf16.to(torch.bfloat16)
    bf16.save_pretrained(out, safe_serialization=True)
    write_profile(out)
    (out / "training_meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return out


# -- main loop -------------------------------------------------------------------------------
@dataclass
class SFTRun:
    """What the loop works with: the model on the fast path, its optimizer and schedule, the eval set."""

    cfg: SFTConfig
    device: torch.device
    out: Path
    processor: Any
    model: Any
    fast: FastQwen3VL
    bank: FrameBank
    codec: PromptCodec
    opt: torch.optim.Optimizer
    sched: torch.optim.lr_scheduler.LambdaLR
    loader: torch.utils.data.DataLoader
    eval_layouts: list
    settings: Any  # training.tiny.fastpath.rollout.RolloutSettings (imported with torch's heavy parts, lazily)


def start_sft(cfg: SFTConfig) -> SFTRun:
    """Seed everything and build the model (or its LoRA probe), optimizer, schedule and data loader."""
    from transformers import AutoProcessor, Qwen3VLForConditionalGeneration

    from agent.maze import generate_from_seed
    from training.tiny.fastpath import RolloutSettings

    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sft_config.json").write_text(cfg.model_dump_json(indent=2) + "\n")
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    device = torch.device(cfg.device)
    processor = AutoProcessor.from_pretrained(cfg.init_dir)
    model = Qwen3VLForConditionalGeneration.from_pretrained(cfg.init_dir, dtype=torch.float32).to(device)
    if cfg.lora_rank:
        from peft import get_peft_model

        model = get_peft_model(model, lora_config(cfg.lora_rank, cfg.lora_rank, cfg.lora_vision))
    model.train()
    bank = FrameBank(FrameCatalog(7), processor.image_processor, device,
                     dtype=torch.bfloat16 if device.type == "cuda" else torch.float32)
    t0 = time.perf_counter()
    if device.type == "cuda":
        bank.fill()  # all 13k frames up front (~8 GB bf16), so the training loop never waits
        log.info("frame bank filled in %.1fs", time.perf_counter() - t0)
    n_params = sum(p.numel() for p in model.parameters())
    log.info("model %.2fM params; config %s", n_params / 1e6, cfg.model_dump_json())
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95),
                            fused=device.type == "cuda")
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, cfg.lr_schedule, cfg.warmup_steps, cfg.max_steps))
    loader = torch.utils.data.DataLoader(DemoBatches(cfg), batch_size=None, num_workers=cfg.num_workers,
                                         pin_memory=device.type == "cuda", persistent_workers=cfg.num_workers > 0,
                                         prefetch_factor=4 if cfg.num_workers else None)
    settings = RolloutSettings(max_turns=cfg.eval_max_turns, temperature=0.0, history=cfg.demo.history,
                               protocol=cfg.demo.protocol)
    return SFTRun(cfg=cfg, device=device, out=out, processor=processor, model=model,
                  fast=FastQwen3VL(model, bank.grid_thw), bank=bank, codec=make_codec(processor), opt=opt, sched=sched,
                  loader=loader, eval_layouts=[generate_from_seed(7, 7, s) for s in range(cfg.eval_seeds)],
                  settings=settings)


def resume_sft(run: SFTRun) -> tuple[int, int, int]:
    """(step, samples seen, next evaluation step): from ``last_state.pt`` with ``resume``, else a fresh start."""
    state_path = run.out / "last_state.pt"
    if not (run.cfg.resume and state_path.exists()):
        return 0, 0, run.cfg.eval_every
    state = torch.load(state_path, map_location=run.device, weights_only=False)
    run.model.load_state_dict(state["model"])
    run.opt.load_state_dict(state["opt"])
    run.sched.load_state_dict(state["sched"])
    start, samples = state["step"], state["samples"]
    log.info("resumed at step %d (%d samples)", start, samples)
    return start, samples, start + run.cfg.eval_every_near


class TrainStats:
    """Loss and accuracies summed over the steps since the last ``train`` record."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.sums = {"loss": 0.0, "token_acc": 0.0, "action_acc": 0.0}
        self.n = 0

    def add(self, loss: torch.Tensor, stats: dict) -> None:
        self.sums["loss"] += loss.detach()
        self.sums["token_acc"] += stats["token_acc"]
        self.sums["action_acc"] += stats["action_acc"]
        self.n += 1

    def record(self) -> dict:
        """The means since the last record; starts a new window."""
        out = {k: round(float(v) / self.n, 4) for k, v in self.sums.items()}
        self._reset()
        return out


def train_step(run: SFTRun, batch: dict) -> tuple[torch.Tensor, dict]:
    """One optimizer step on ``batch``: its loss and accuracies."""
    loss, stats = sft_loss(run.fast, run.bank, batch, run.device)
    run.opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(run.model.parameters(), run.cfg.grad_clip)
    run.opt.step()
    run.sched.step()
    return loss, stats


def evaluate_step(run: SFTRun, step: int, samples: int, elapsed: float, saved: list[dict]) -> dict:
    """The closed-loop greedy solve rate at ``step`` (and the runner's, for an in-band rate with
    ``confirm_with_runner``); an in-band checkpoint is saved and appended to ``saved``. The eval record."""
    from training.tiny.fastpath import play, solve_rate
    from training.tiny.policies import evaluate_hf

    cfg = run.cfg
    run.model.eval()
    te = time.perf_counter()
    rate = solve_rate(play(run.fast, run.bank, run.codec, run.bank.catalog, run.eval_layouts, run.settings,
                           device=run.device))
    rec = {"kind": "eval", "step": step, "samples": samples, "elapsed_s": round(elapsed, 2),
           "solve_rate_fast": rate, "eval_s": round(time.perf_counter() - te, 2)}
    lo, hi = cfg.band
    if lo <= rate <= (hi + 0.05 if cfg.confirm_with_runner else hi):
        checked = rate  # the rate a checkpoint is judged by: the runner's when it is asked
        if cfg.confirm_with_runner:
            checked, _ = evaluate_hf(run.model, run.processor, range(cfg.eval_seeds), cfg.demo.history,
                                     cfg.eval_max_turns, label=f"sft-step{step}")
            rec["solve_rate_runner"] = checked
        if lo <= checked <= hi:
            meta = {"step": step, "samples": samples, "solve_rate": checked, "solve_rate_fast": rate,
                    "solve_rate_runner": rec.get("solve_rate_runner"), "train_seconds": round(elapsed, 1),
                    "seed": cfg.seed}
            path = save_model_folder(run.model, cfg.init_dir, run.out / "checkpoints" / f"step_{step}", meta)
            saved.append({**meta, "path": str(path)})
    run.model.train()
    log.info("eval %s", rec)
    return rec


def stops_here(cfg: SFTConfig, rec: dict) -> bool:
    """Whether an evaluation ends the run: above the band (by the runner, or well above it by the
    fast rate) with ``stop_above_band``, or at ``stop_rate``."""
    rate = rec["solve_rate_fast"]
    rate_now = rec.get("solve_rate_runner", rate)
    done = False
    if cfg.stop_above_band and rate_now > cfg.band[1] and rec.get("solve_rate_runner") is not None:
        log.info("solve rate %.3f is above the band: stopping", rate_now)
        done = True
    if cfg.stop_above_band and rate > cfg.band[1] + 0.1:
        done = True
    if cfg.stop_rate is not None and rate >= cfg.stop_rate:
        log.info("solve rate %.3f reached stop_rate %.3f: stopping", rate, cfg.stop_rate)
        done = True
    return done


def finish_sft(run: SFTRun, step: int, samples: int, rate: float, saved: list[dict], t_train: float) -> dict:
    """Save the resume state, copy the selected checkpoint to ``selected`` and the final weights to
    ``last``; the run's summary (also written to ``summary.json``; ``t_train``: when the loop began)."""
    cfg, out = run.cfg, run.out
    torch.save({"model": run.model.state_dict(), "opt": run.opt.state_dict(), "sched": run.sched.state_dict(),
                "step": step, "samples": samples}, out / "last_state.pt")
    summary = {"steps": step, "samples": samples, "train_seconds": round(time.perf_counter() - t_train, 1),
               "last_fast_rate": rate,
               "saved": saved, "device": torch.cuda.get_device_name() if run.device.type == "cuda" else "cpu"}
    if saved:
        best = saved[-1] if cfg.select == "last" else min(
            saved, key=lambda s: abs(s["solve_rate"] - cfg.target_rate))
        sel = out / "selected"
        if sel.exists():
            shutil.rmtree(sel)
        shutil.copytree(best["path"], sel)
        summary["selected"] = best
    # The final weights too (a continuation past the band is judged by them).
    save_model_folder(run.model, cfg.init_dir, out / "last", {"step": step, "samples": samples, "last_fast_rate": rate})
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    log.info("summary %s", summary)
    return summary


def train(cfg: SFTConfig) -> dict:
    """Run SFT; returns a summary (selected checkpoint, its rates, timings)."""
    run = start_sft(cfg)
    start, samples, next_eval = resume_sft(run)
    saved: list[dict] = []
    rate, step, acc = 0.0, start, TrainStats()
    t_train = time.perf_counter()
    with (run.out / "metrics.jsonl").open("a") as metrics_f:
        def emit(rec: dict) -> None:
            metrics_f.write(json.dumps(rec) + "\n")
            metrics_f.flush()

        for step, batch in enumerate(run.loader, start=start + 1):
            loss, stats = train_step(run, batch)
            samples += batch["input_ids"].shape[0]
            acc.add(loss, stats)
            elapsed = time.perf_counter() - t_train
            if step % cfg.log_every == 0 or step == 1:
                rec = {"step": step, "samples": samples, "elapsed_s": round(elapsed, 2),
                       "lr": run.sched.get_last_lr()[0], "samples_per_s": round(samples / elapsed, 1)} | acc.record()
                log.info("step %d %s", step, rec)
                emit({"kind": "train", **rec})
            done = step - start >= cfg.max_steps or elapsed > cfg.max_minutes * 60
            if step >= next_eval or done:
                rec = evaluate_step(run, step, samples, elapsed, saved)
                emit(rec)
                rate = rec["solve_rate_fast"]
                next_eval = step + (cfg.eval_every_near if rate >= cfg.near_rate else cfg.eval_every)
                done = stops_here(cfg, rec) or done
            if done:
                break
        return finish_sft(run, step, samples, rate, saved, t_train)


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--config", help="YAML/JSON SFTConfig; flags override it")
    parser.add_argument("--init", dest="init_dir", help="model folder to start from")
    parser.add_argument("--out", dest="out_dir")
    for name in ("seed", "batch_size", "max_steps", "lora_rank", "eval_every", "eval_every_near", "eval_seeds", "num_workers",
                 "log_every", "warmup_steps"):
        parser.add_argument("--" + name.replace("_", "-"), type=int)
    for name in ("lr", "max_minutes", "stop_rate"):
        parser.add_argument("--" + name.replace("_", "-"), type=float)
    parser.add_argument("--device")
    parser.add_argument("--select", choices=["closest", "last"])
    parser.add_argument("--lr-schedule", choices=["constant", "cosine"])
    parser.add_argument("--lora-vision", action="store_true", default=None)
    parser.add_argument("--no-stop-above-band", dest="stop_above_band", action="store_false", default=None)
    parser.add_argument("--resume", action="store_true", default=None)
    parser.add_argument("--no-runner-confirm", dest="confirm_with_runner", action="store_false", default=None)
    parser.add_argument("--solver-share", type=float, help="demo.solver_share: mixed-quality demonstrations")
    flags = vars(parser.parse_args(argv))
    share = flags.pop("solver_share")
    cfg = load_with_overrides(SFTConfig, flags)
    if share is not None:  # a nested field: validated again, so a share outside [0, 1] is refused
        cfg = SFTConfig.model_validate(cfg.model_dump() | {"demo": cfg.demo.model_dump() | {"solver_share": share}})
    train(cfg)


if __name__ == "__main__":
    main()
