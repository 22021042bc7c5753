"""Run a training spec with the project's own GRPO trainer (``maze-train submit --trainer local``).

The Ray job's entrypoint is ``python -m training.local_job <spec as base64 JSON>``: it maps the
SkyRL-vocabulary spec onto :class:`training.tiny.trainers.GRPOConfig` and trains on whatever device
the job landed on (CUDA if present, else CPU). Checkpoints resume from
``{ckpt_path}/latest_ckpt_global_step.txt`` like SkyRL's ``resume_mode=latest``.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import sys

from training.spec import TrainSpec

log = logging.getLogger("training.local_job")

# The fixed maze set the served curve scores (`maze-train watch`, maze-eval's default seeds 0-63):
# never drawn for training, so a served rise is not the adapter memorizing its exam.
SERVED_SEEDS = 64


def to_grpo_config(spec: TrainSpec, device: str) -> dict:
    """The local trainer's settings for ``spec`` (same names where SkyRL has them)."""
    o, out, g = spec.optim, spec.output, spec.generation
    steps_per_epoch = math.ceil(spec.data.train_rows / o.train_batch_size)
    return {
        "model_path": spec.model.path,
        "ckpt_path": out.ckpt_path,
        "export_path": out.export_path,
        "n_samples_per_prompt": o.n_samples_per_prompt,
        "train_batch_size": o.train_batch_size,
        "policy_mini_batch_size": o.policy_mini_batch_size,
        "update_epochs_per_batch": o.update_epochs_per_batch,
        "lr": o.lr,
        "seed": o.seed,
        "max_turns": spec.env.max_turns,
        "temperature": g.temperature,
        "lora_rank": spec.model.lora.rank,
        "lora_alpha": spec.model.lora.alpha,
        "max_steps": o.epochs * steps_per_epoch,
        "eval_interval": out.eval_interval,
        "eval_before_train": out.eval_before_train,
        "eval_seeds": spec.data.eval_rows,
        "held_out_seeds": SERVED_SEEDS,
        "ckpt_interval": out.ckpt_interval,
        "hf_save_interval": out.hf_save_interval if out.hf_save_interval > 0 else out.ckpt_interval,
        "resume_mode": out.resume_mode,
        "env_id": spec.env.env_id,
        "device": device,
    }


def local_entrypoint(spec: TrainSpec) -> str:
    """The shell command a Ray job runs for ``spec`` with the local trainer."""
    blob = base64.urlsafe_b64encode(spec.model_dump_json().encode()).decode()
    return f"python -m training.local_job {blob}"


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = sys.argv[1:] if argv is None else argv
    spec = TrainSpec.model_validate(json.loads(base64.urlsafe_b64decode(args[0])))
    import torch

    from training.tiny.trainers import GRPOConfig, grpo

    device = "cuda" if torch.cuda.is_available() else "cpu"
    cfg = GRPOConfig.model_validate(to_grpo_config(spec, device))
    log.info("local GRPO for %s on %s: %d steps", spec.name, device, cfg.max_steps)
    summary = grpo.train(cfg)
    log.info("finished at step %s", summary.get("global_step"))


if __name__ == "__main__":
    main()
