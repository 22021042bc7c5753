"""Pure functions from a :class:`~training.spec.TrainSpec` to SkyRL's overrides and the job command.

SkyRL 0.4.0 parses ``key=value`` overrides (OmegaConf dotlist, no ``+`` prefix) into its config
dataclasses. Every key rendered here is checked against the key list read from the skyrl wheel
(``training/skyrl/skyrl_config_keys_0.4.0.txt``) by the tests, and the reference spec's command is
golden-tested. No I/O here.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from training.spec import TrainSpec

ENTRYPOINT_MODULE = "training.skyrl_entrypoint"
PYTHON = "python"


def format_value(value: Any) -> str:
    """A Python value as OmegaConf's dotlist parser reads it back."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(json.dumps(v) if isinstance(v, str) else format_value(v) for v in value) + "]"
    return repr(value) if isinstance(value, float) else str(value)


def _pairs(spec: TrainSpec) -> list[tuple[str, Any]]:
    """``(key, value)`` pairs in the reference script's order (data, model, placement, ...)."""
    m, p, i, o, g, out = spec.model, spec.placement, spec.inference, spec.optim, spec.generation, spec.output
    return [
        ("data.train_data", [spec.data.train_file]),
        ("data.val_data", [spec.data.eval_file]),
        ("trainer.algorithm.advantage_estimator", o.advantage_estimator),
        ("trainer.policy.model.path", m.path),
        ("trainer.policy.model.lora.rank", m.lora.rank),
        ("trainer.policy.model.lora.alpha", m.lora.alpha),
        ("trainer.policy.model.lora.target_modules", m.lora.target_modules),
        ("trainer.policy.model.lora.lora_sync_path", m.lora.sync_path),
        ("trainer.placement.colocate_all", p.colocate_all),
        ("trainer.strategy", p.strategy),
        ("trainer.placement.policy_num_nodes", p.num_nodes),
        ("trainer.placement.policy_num_gpus_per_node", p.gpus_per_node),
        ("trainer.placement.ref_num_nodes", p.num_nodes),
        ("trainer.placement.ref_num_gpus_per_node", p.gpus_per_node),
        ("trainer.ref.fsdp_config.cpu_offload", p.ref_cpu_offload),
        ("generator.inference_engine.num_engines", i.num_engines),
        ("generator.inference_engine.tensor_parallel_size", i.tensor_parallel_size),
        ("generator.inference_engine.gpu_memory_utilization", i.gpu_memory_utilization),
        ("generator.inference_engine.engine_init_kwargs.max_model_len", i.max_model_len),
        ("trainer.epochs", o.epochs),
        ("trainer.train_batch_size", o.train_batch_size),
        ("trainer.policy_mini_batch_size", o.policy_mini_batch_size),
        ("trainer.micro_forward_batch_size_per_gpu", o.micro_forward_batch_size_per_gpu),
        ("trainer.micro_train_batch_size_per_gpu", o.micro_train_batch_size_per_gpu),
        ("trainer.update_epochs_per_batch", o.update_epochs_per_batch),
        ("trainer.max_prompt_length", g.max_prompt_length),
        ("generator.sampling_params.max_generate_length", g.max_generate_length),
        ("generator.sampling_params.temperature", g.temperature),
        ("generator.max_turns", spec.env.max_turns),
        ("generator.max_input_length", g.max_input_length),
        ("generator.n_samples_per_prompt", o.n_samples_per_prompt),
        # The multimodal generator needs unbatched generation and padded micro batches.
        ("generator.vision_language_generator", True),
        ("generator.batched", False),
        ("trainer.remove_microbatch_padding", False),
        ("trainer.algorithm.use_kl_loss", o.use_kl_loss),
        ("trainer.policy.optimizer_config.lr", o.lr),
        ("trainer.seed", o.seed),
        ("environment.env_class", spec.env.env_class),
        ("trainer.logger", out.logger),
        ("trainer.project_name", spec.project),
        ("trainer.run_name", spec.name),
        ("trainer.resume_mode", None if out.resume_mode == "none" else out.resume_mode),
        ("trainer.ckpt_path", out.ckpt_path),
        ("trainer.export_path", out.export_path),
        ("trainer.ckpt_interval", out.ckpt_interval),
        ("trainer.hf_save_interval", out.hf_save_interval),
        ("trainer.eval_interval", out.eval_interval),
        ("trainer.eval_before_train", out.eval_before_train),
        ("trainer.dump_eval_results", out.dump_eval_results),
    ]


def to_skyrl_overrides(spec: TrainSpec) -> list[str]:
    """Every SkyRL ``key=value`` override of the job, ``spec.extra_overrides`` last.

    Args:
        spec: the training spec.

    Returns:
        Overrides as SkyRL's CLI takes them (unquoted; quote them for a shell).
    """
    return [f"{k}={format_value(v)}" for k, v in _pairs(spec)] + list(spec.extra_overrides)


def entrypoint_argv(spec: TrainSpec) -> list[str]:
    """The job's command as an argv: the entrypoint module, its own options, then the overrides."""
    own = [
        "--reward", spec.env.reward,
        "--protocol", spec.env.protocol,
        "--env-id", spec.env.env_id,
        "--env-class", spec.env.env_class,
        "--train-rows", str(spec.data.train_rows),
        "--eval-rows", str(spec.data.eval_rows),
    ]
    return [PYTHON, "-m", ENTRYPOINT_MODULE, *own, *to_skyrl_overrides(spec)]


def render_entrypoint(spec: TrainSpec) -> str:
    """The job's entrypoint as a shell command, one option or override per line."""
    argv = [shlex.quote(a) for a in entrypoint_argv(spec)]
    head, rest = argv[:3], argv[3:]
    lines, k = [" ".join(head)], 0
    while k < len(rest):  # keep "--flag value" pairs on one line
        step = 2 if rest[k].startswith("--") else 1
        lines.append(" ".join(rest[k : k + step]))
        k += step
    return " \\\n    ".join(lines)
