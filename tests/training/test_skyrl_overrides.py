"""The training spec renders the reference SkyRL job: golden command, known keys, typed values."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from pydantic import ValidationError

from training.overrides import entrypoint_argv, render_entrypoint, to_skyrl_overrides
from training.skyrl.keys import key_version, load_keys, unknown_keys
from training.spec import TrainSpec

GOLDEN = Path(__file__).parent / "golden" / "reference_entrypoint.txt"

# The reference job as skyrl-facts.md describes it ("The reference job"), key by key.
REFERENCE_VALUES = {
    "trainer.algorithm.advantage_estimator": "grpo",
    "trainer.policy.model.lora.rank": 32,
    "trainer.policy.model.lora.alpha": 32,
    "trainer.placement.colocate_all": True,
    "trainer.strategy": "fsdp",
    "trainer.placement.policy_num_nodes": 3,
    "trainer.placement.policy_num_gpus_per_node": 2,
    "trainer.placement.ref_num_nodes": 3,
    "trainer.placement.ref_num_gpus_per_node": 2,
    "trainer.ref.fsdp_config.cpu_offload": False,
    "generator.inference_engine.num_engines": 6,
    "generator.inference_engine.tensor_parallel_size": 1,
    "generator.inference_engine.gpu_memory_utilization": 0.45,
    "generator.inference_engine.engine_init_kwargs.max_model_len": 16000,
    "environment.env_class": "visgym",
    "trainer.epochs": 20,
    "trainer.train_batch_size": 24,
    "trainer.policy_mini_batch_size": 12,
    "trainer.micro_forward_batch_size_per_gpu": 1,
    "trainer.micro_train_batch_size_per_gpu": 1,
    "trainer.update_epochs_per_batch": 1,
    "trainer.max_prompt_length": 2048,
    "generator.sampling_params.max_generate_length": 1024,
    "generator.sampling_params.temperature": 0.7,
    "generator.max_turns": 15,
    "generator.max_input_length": 8192,
    "generator.n_samples_per_prompt": 8,
    "trainer.algorithm.use_kl_loss": False,
    "trainer.policy.optimizer_config.lr": 3e-6,
    "trainer.eval_interval": 10,
    "trainer.eval_before_train": True,
    "trainer.ckpt_interval": 20,
    "trainer.hf_save_interval": 20,
    "trainer.resume_mode": "latest",
    "trainer.logger": "console",
    "trainer.dump_eval_results": True,
    "generator.vision_language_generator": True,
    "generator.batched": False,
    "trainer.remove_microbatch_padding": False,
}
PYTHON_TYPES = {"int": int, "float": float, "bool": bool, "str": str}


def _parsed(overrides: list[str]) -> dict:
    """The overrides as SkyRL reads them (OmegaConf dotlist), flattened to dotted keys."""
    def flat(d, prefix=""):
        for k, v in d.items():
            if isinstance(v, dict):
                yield from flat(v, f"{prefix}{k}.")
            else:
                yield f"{prefix}{k}", v

    return dict(flat(OmegaConf.to_container(OmegaConf.from_cli(overrides))))


def test_reference_command_is_golden():
    assert render_entrypoint(TrainSpec()) == GOLDEN.read_text().rstrip("\n")


def test_rendered_command_round_trips_through_a_shell():
    spec = TrainSpec.model_validate({"model": {"path": "/models/with space/it's"}})
    command = render_entrypoint(spec)
    # bash itself splits the multi-line command (printf stands in for python).
    out = subprocess.run(["bash", "-c", "printf '%s\\0' " + command], capture_output=True, check=True)
    assert out.stdout.decode().split("\0")[:-1] == entrypoint_argv(spec)


def test_reference_values_as_skyrl_parses_them():
    values = _parsed(to_skyrl_overrides(TrainSpec()))
    assert {k: values[k] for k in REFERENCE_VALUES} == REFERENCE_VALUES
    assert values["data.train_data"] == ["/shared/maze-gateway/data/maze_2d_simple/train.parquet"]
    assert values["data.val_data"] == ["/shared/maze-gateway/data/maze_2d_simple/eval.parquet"]
    for key in ("trainer.ckpt_path", "trainer.export_path", "trainer.policy.model.lora.lora_sync_path"):
        assert values[key].startswith("/shared/")


def test_every_override_key_exists_in_skyrl_0_4_0():
    keys = load_keys()
    assert key_version() == "0.4.0" and len(keys) > 300
    overrides = to_skyrl_overrides(TrainSpec())
    assert unknown_keys(overrides) == []
    assert len({o.partition("=")[0] for o in overrides}) == len(overrides)  # no key twice
    # Values have the types SkyRL's dataclasses declare.
    for key, value in _parsed(overrides).items():
        declared = keys.get(key, "dict")
        if declared in PYTHON_TYPES:
            assert isinstance(value, PYTHON_TYPES[declared]), (key, value, declared)


def test_unknown_keys_are_caught():
    assert unknown_keys(["trainer.polcy.model.path=x", "generator.inference_engine.engine_init_kwargs.foo=1"]) == [
        "trainer.polcy.model.path"
    ]
    with pytest.raises(ValidationError, match="not SkyRL 0.4.0 config keys"):
        TrainSpec(extra_overrides=["trainer.learning_rate=1"])
    with pytest.raises(ValidationError, match="'\\+' prefix"):
        TrainSpec(extra_overrides=["+trainer.seed=1"])
    spec = TrainSpec(extra_overrides=["trainer.seed=7"])
    assert to_skyrl_overrides(spec)[-1] == "trainer.seed=7"


def test_spec_from_yaml_overrides_only_what_it_names(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(
        "name: tiny\nenv: {env_id: maze_2d/easy, reward: task, max_turns: 20}\n"
        "output: {ckpt_path: 's3://bucket/ckpts/tiny/', resume_mode: none}\n"
    )
    spec = TrainSpec.from_file(path)
    values = _parsed(to_skyrl_overrides(spec))
    assert values["trainer.run_name"] == "tiny" and values["generator.max_turns"] == 20
    assert values["trainer.ckpt_path"] == "s3://bucket/ckpts/tiny" and values["trainer.resume_mode"] is None
    assert values["trainer.policy.model.lora.rank"] == 32  # untouched: the reference value
    argv = entrypoint_argv(spec)
    assert argv[argv.index("--reward") + 1] == "task" and argv[argv.index("--env-id") + 1] == "maze_2d/easy"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"lr": 1}, "Extra inputs are not permitted"),
        ({"optim": {"train_batch_size": 25}}, "multiple of optim.policy_mini_batch_size"),
        ({"inference": {"num_engines": 4}}, "must equal placement.num_nodes x gpus_per_node"),
        ({"env": {"env_id": "maze_2d/huge"}}, "unknown env id"),
        ({"env": {"reward": "format"}}, "task\\+parsed"),
        ({"env": {"reward": "task+format"}}, "'sft' or 'instruct'"),  # the old name is gone, with the choices named
        ({"env": {"reward": "instruct"}}, "set env.protocol: keyword"),
    ],
)
def test_spec_rejects_bad_values(data, message):
    with pytest.raises(ValidationError, match=message):
        TrainSpec.model_validate(data)


def test_every_spec_field_has_a_description():
    def walk(model):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name}"
            sub = field.annotation
            if isinstance(sub, type) and hasattr(sub, "model_fields"):
                walk(sub)

    walk(TrainSpec)
