"""The typed training spec: one YAML file describes a SkyRL GRPO job and the cluster it runs on.

Defaults are the reference run (Qwen3-VL-8B SFT checkpoint + LoRA 32 on ``maze_2d/simple``, 3
nodes x 2 GPUs, colocated FSDP + 6 vLLM engines, as in SkyRL's examples/train/visgym scripts), so
``TrainSpec()`` *is* the reference job, with one exception: LoRA targets the language model's
linear layers (``LANGUAGE_MODEL_TARGETS``), not SkyRL's ``all-linear``, because the gateway serves
adapters without vision-tower LoRA unless its config turns it on. :mod:`training.overrides` turns a spec into SkyRL
overrides and :mod:`training.k8s` into the RayCluster it needs: both read this one source.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from agent.runner import ConfigModel, EnvId, ProtocolName
from training.skyrl.dataset import EVAL_FILE, TRAIN_FILE
from training.skyrl.keys import SKYRL_VERSION, unknown_keys
from training.skyrl.names import RECIPE_PROTOCOLS, VISGYM_ENV_CLASS, RewardMode

SHARED_ROOT = "/shared/maze-gateway"
REFERENCE_NAME = "maze-grpo-simple"
#: The default LoRA targets: the language model's linear layers, as a regex peft full-matches against
#: module names (SkyRL hands the string to peft as is). SkyRL's own default, "all-linear", also wraps
#: Qwen3-VL's vision tower and merger, which the serving gateway applies only with lora.vision_tower
#: on (off by default): an adapter trained there would not be served as trained
#: (training.lora_targets checks a spec against the serving config at submit).
LANGUAGE_MODEL_TARGETS = r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"


class SpecModel(ConfigModel):
    """Base of every spec section: unknown keys are errors; loadable from YAML (missing keys keep
    the reference defaults)."""


def _strip_slash(v: str) -> str:
    return v.rstrip("/") if v not in ("/", "s3://") else v


class EnvSpec(SpecModel):
    """The environment the policy is trained on (the project's own maze env)."""

    env_id: EnvId = Field("maze_2d/simple", description="maze variant id written to the dataset rows")
    env_class: str = Field(VISGYM_ENV_CLASS, description="skyrl-gym env class the rows and SkyRL name")
    reward: RewardMode = Field(
        "sft",
        description=(
            "SkyRL's VisGym recipes 'sft' (tuple actions, 0.8 task + 0.2 tag-format rate: the reference "
            "run) or 'instruct' (keyword actions, task only); or the project protocol's 'task' (1/0) or "
            "'task+parsed' (0.8 task + 0.2 parsed-reply rate)"
        ),
    )
    protocol: ProtocolName = Field(
        "tuple", description="prompt protocol the env speaks (tuple or keyword); sft needs tuple, instruct keyword"
    )
    max_turns: int = Field(15, ge=1, description="turns per episode (generator.max_turns)")

    @model_validator(mode="after")
    def _recipe_protocol(self) -> EnvSpec:
        fixed = RECIPE_PROTOCOLS.get(self.reward)
        if fixed is not None and self.protocol != fixed:
            raise ValueError(f"reward {self.reward!r} is SkyRL's recipe with the {fixed} protocol; set env.protocol: {fixed}")
        return self


class DataSpec(SpecModel):
    """Where the parquet datasets live (on storage every node mounts) and how many rows."""

    dir: str = Field(f"{SHARED_ROOT}/data/maze_2d_simple", description="folder of train.parquet and eval.parquet")
    train_rows: int = Field(256, ge=1, description="unseeded training rows (random mazes)")
    eval_rows: int = Field(64, ge=1, description="evaluation rows with seed = 0..eval_rows-1")

    @field_validator("dir")
    @classmethod
    def _no_trailing_slash(cls, v: str) -> str:
        return _strip_slash(v)

    @property
    def train_file(self) -> str:
        return f"{self.dir}/{TRAIN_FILE}"

    @property
    def eval_file(self) -> str:
        return f"{self.dir}/{EVAL_FILE}"


class LoraSpec(SpecModel):
    """LoRA on the policy (rank 0 would train the full model)."""

    rank: int = Field(32, ge=0, description="LoRA rank (trainer.policy.model.lora.rank)")
    alpha: int = Field(32, ge=1, description="LoRA alpha")
    target_modules: str = Field(
        LANGUAGE_MODEL_TARGETS,
        description=(
            "modules LoRA wraps: a regex peft full-matches against module names, or 'all-linear'. The default, the "
            "language model's linear layers, follows the serving gateway's lora.vision_tower off (its default): "
            "'all-linear' (SkyRL's default) also wraps the vision tower and its merger, and is right only with "
            "tower LoRA on in the serving config the adapters are published to (maze-train submit checks)"
        ),
    )
    sync_path: str = Field(
        f"{SHARED_ROOT}/lora_sync", description="where adapters are handed to vLLM; shared by all nodes"
    )


class ModelSpec(SpecModel):
    """The policy model."""

    path: str = Field(
        f"{SHARED_ROOT}/models/qwen3-vl-8b-maze-sft",
        description="HF id or folder of the starting checkpoint (the reference run used a Qwen3-VL-8B SFT checkpoint)",
    )
    lora: LoraSpec = Field(default_factory=LoraSpec, description="LoRA settings")


class PlacementSpec(SpecModel):
    """How training and inference share the GPUs."""

    num_nodes: int = Field(3, ge=1, description="GPU nodes for the policy and the reference model")
    gpus_per_node: int = Field(2, ge=1, description="GPUs per node")
    colocate_all: bool = Field(True, description="training and vLLM share every GPU, taking turns")
    strategy: Literal["fsdp", "megatron"] = Field("fsdp", description="training backend (the VLM generator needs fsdp)")
    ref_cpu_offload: bool = Field(
        False, description="offload the reference model's FSDP parameters to CPU (the reference job keeps them on GPU)"
    )


class InferenceSpec(SpecModel):
    """vLLM engines used for rollouts."""

    num_engines: int = Field(6, ge=1, description="vLLM engines")
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs per engine")
    gpu_memory_utilization: float = Field(0.45, gt=0, le=1, description="vLLM's share of GPU memory (colocated)")
    max_model_len: int = Field(16000, ge=1, description="vLLM max_model_len")


class OptimSpec(SpecModel):
    """The GRPO update."""

    advantage_estimator: str = Field("grpo", description="SkyRL advantage estimator")
    epochs: int = Field(20, ge=1, description="passes over the training set")
    train_batch_size: int = Field(24, ge=1, description="prompts per training step")
    policy_mini_batch_size: int = Field(12, ge=1, description="prompts per optimizer step")
    micro_forward_batch_size_per_gpu: int = Field(1, ge=1, description="micro batch for forward passes")
    micro_train_batch_size_per_gpu: int = Field(1, ge=1, description="micro batch for backward passes")
    update_epochs_per_batch: int = Field(1, ge=1, description="PPO epochs per batch")
    n_samples_per_prompt: int = Field(8, ge=1, description="rollouts per prompt (the GRPO group)")
    lr: float = Field(3e-6, gt=0, description="learning rate")
    use_kl_loss: bool = Field(False, description="add a KL loss to the reference model")
    seed: int = Field(
        42, description="trainer.seed: seeds the LoRA initialization, the maze draws and rollout sampling, so a run "
        "is repeatable and runs with other seeds show how much a curve owes to chance"
    )


class GenerationSpec(SpecModel):
    """Rollout lengths and sampling."""

    max_prompt_length: int = Field(2048, ge=1, description="trainer.max_prompt_length")
    max_generate_length: int = Field(1024, ge=1, description="tokens per reply")
    max_input_length: int = Field(8192, ge=1, description="conversation tokens before a trajectory is cut")
    temperature: float = Field(0.7, ge=0, description="rollout sampling temperature")


class OutputSpec(SpecModel):
    """Checkpoints, exports, evaluation and logging."""

    ckpt_path: str = Field(f"{SHARED_ROOT}/ckpts/{REFERENCE_NAME}", description="checkpoints (local, shared FS or s3://)")
    export_path: str = Field(
        f"{SHARED_ROOT}/exports/{REFERENCE_NAME}", description="HF exports and dumped evals (local, shared FS or s3://)"
    )
    ckpt_interval: int = Field(20, description="steps between checkpoints")
    hf_save_interval: int = Field(20, description="steps between inference-ready exports (-1: never)")
    eval_interval: int = Field(10, description="steps between evaluations")
    eval_before_train: bool = Field(True, description="evaluate the starting model first")
    dump_eval_results: bool = Field(True, description="write per-step eval JSONL under the export path")
    resume_mode: Literal["latest", "none"] = Field(
        "latest", description="'latest' resumes from the newest checkpoint; 'none' starts fresh"
    )
    logger: Literal["console", "wandb", "mlflow", "tensorboard"] = Field("console", description="metrics logger")

    @field_validator("ckpt_path", "export_path")
    @classmethod
    def _no_trailing_slash(cls, v: str) -> str:
        return _strip_slash(v)


class ClusterSpec(SpecModel):
    """The Kubernetes RayCluster the job runs on (GPU workers follow ``placement``)."""

    name: str = Field("maze-train", description="RayCluster name")
    namespace: str = Field("maze-gateway", description="Kubernetes namespace")
    image: str = Field(
        f"maze-gateway-train:skyrl-{SKYRL_VERSION}", description="training image (docker/Dockerfile.train)"
    )
    head_cpu: str = Field("8", description="head CPU request and limit")
    head_memory: str = Field("64Gi", description="head memory: the driver holds datasets and rollout batches")
    worker_cpu: str = Field("16", description="CPU per GPU worker")
    worker_memory: str = Field("200Gi", description="memory per GPU worker (FSDP offload, vLLM sleep)")
    shm_size: str = Field("32Gi", description="/dev/shm per worker (NCCL, vLLM)")
    pvc_name: str = Field("fsx-claim", description="PersistentVolumeClaim of the FSx for Lustre volume")
    mount_path: str = Field("/shared", description="where the shared volume is mounted on head and workers")
    fsx_filesystem_id: str = Field("fs-0123456789abcdef0", description="FSx for Lustre file system id (replace)")
    fsx_dns_name: str = Field(
        "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com", description="FSx for Lustre DNS name (replace)"
    )
    fsx_mount_name: str = Field("abcdefgh", description="FSx for Lustre mount name (replace)")
    storage: str = Field("1200Gi", description="capacity of the PersistentVolume")


class TrainSpec(SpecModel):
    """A SkyRL GRPO job on the maze; every default is the reference run's value but the LoRA targets
    (the language model's layers: what the gateway serves by default)."""

    name: str = Field(REFERENCE_NAME, description="run name (trainer.run_name) and default job id prefix")
    project: str = Field("maze-gateway", description="project name for the metrics logger")
    env: EnvSpec = Field(default_factory=EnvSpec, description="environment")
    data: DataSpec = Field(default_factory=DataSpec, description="datasets")
    model: ModelSpec = Field(default_factory=ModelSpec, description="policy model")
    placement: PlacementSpec = Field(default_factory=PlacementSpec, description="GPU placement")
    inference: InferenceSpec = Field(default_factory=InferenceSpec, description="vLLM rollout engines")
    optim: OptimSpec = Field(default_factory=OptimSpec, description="GRPO update")
    generation: GenerationSpec = Field(default_factory=GenerationSpec, description="rollout lengths and sampling")
    output: OutputSpec = Field(default_factory=OutputSpec, description="checkpoints, exports, evals, logging")
    cluster: ClusterSpec = Field(default_factory=ClusterSpec, description="RayCluster for this job")
    env_vars: dict[str, str] = Field(default_factory=dict, description="environment variables for the Ray job")
    extra_overrides: list[str] = Field(
        default_factory=list, description="further SkyRL key=value overrides, appended last (keys are checked)"
    )

    @field_validator("extra_overrides")
    @classmethod
    def _plain_overrides(cls, v: list[str]) -> list[str]:
        for item in v:
            if item.startswith("+") or "=" not in item:
                raise ValueError(f"override must be key=value without a '+' prefix, got {item!r}")
        unknown = unknown_keys(v)
        if unknown:
            raise ValueError(f"not SkyRL {SKYRL_VERSION} config keys: {unknown}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> TrainSpec:
        o, p, i = self.optim, self.placement, self.inference
        if o.train_batch_size % o.policy_mini_batch_size:
            raise ValueError("optim.train_batch_size must be a multiple of optim.policy_mini_batch_size")
        if p.colocate_all and i.num_engines * i.tensor_parallel_size != p.num_nodes * p.gpus_per_node:
            raise ValueError(
                "with colocate_all, inference.num_engines x tensor_parallel_size must equal "
                f"placement.num_nodes x gpus_per_node ({p.num_nodes * p.gpus_per_node})"
            )
        if self.generation.max_input_length < self.generation.max_prompt_length:
            raise ValueError("generation.max_input_length must be at least max_prompt_length")
        return self


__all__ = [
    "LANGUAGE_MODEL_TARGETS",
    "ClusterSpec", "DataSpec", "EnvSpec", "GenerationSpec", "InferenceSpec", "LoraSpec", "ModelSpec",
    "OptimSpec", "OutputSpec", "PlacementSpec", "SpecModel", "TrainSpec",
]
