"""``ServingConfig``: the one source of truth for a gateway deployment.

The Ray Serve LLM app (``serving.app``) and the KubeRay RayService manifest
(``serving.k8s``) are both derived from it. Shipped configs live in ``serving/configs/``.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, field_validator, model_validator

from serving.config.auth import (
    MIN_SECRET_LENGTH,
    ApiKeySpec,
    AuthSpec,
    KeyFileSpec,
    KeyLimitsSpec,
    LimitsSpec,
    RateStoreSpec,
    Role,
)
from serving.config.base import NAME, SectionModel
from serving.config.gate import GatePolicy, GateSpec
from serving.config.guard import GuardPolicy, GuardSpec

CONFIG_DIR = Path(__file__).parents[1] / "configs"
REPO_ROOT = Path(__file__).resolve().parents[2]
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def is_loopback(host: str) -> bool:
    """Whether a bind address is reachable only from this machine (127.0.0.0/8, ::1, localhost)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class AgentProfileSpec(SectionModel):
    """How the agent must talk to this base model (what it was trained with), as ``/v1/models``
    reports it. Clients parse it with ``agent.protocol.AgentProfile``, the one profile parser; the
    gateway imports no agent code, so this only checks the same shape (a subset of what the parser
    accepts, with the same defaults; tests/test_agent_profiles.py keeps the two in step)."""

    protocol: Literal["tuple", "keyword"] = Field("tuple", description="prompt protocol")
    history: str = Field("full", description="'full' or 'window:K'")

    @field_validator("history")
    @classmethod
    def _history(cls, v: str) -> str:
        if v != "full" and not re.fullmatch(r"window:\d+", v):
            raise ValueError(f"history must be 'full' or 'window:K', got {v!r}")
        return v


class BaseModelSpec(SectionModel):
    """One base model served by the gateway."""

    id: str = Field(description="served model id; adapters are addressed as '<id>:<adapter>'")
    source: str = Field(description="model folder (local path, relative to the repo for shipped models) or hub id")
    max_model_len: int = Field(4096, ge=256, description="context length")
    agent_profile: AgentProfileSpec = Field(default_factory=AgentProfileSpec, description="protocol and history policy")
    mm_cache_gb: float = Field(
        4.0, ge=0,
        description=(
            "GiB of processed images the engine keeps for reuse (vLLM mm_processor_cache_gb): an agent "
            "re-sends its recent frames every turn, and a hit skips their preprocessing and transfer. The "
            "engine core holds the processed tensors up to this size (the front end only their keys), so it "
            "is the bound on that part of the replica's memory, which a steady image workload fills to it. "
            "Size it to the frames in flight (concurrent episodes x images per prompt x processed size); "
            "0 turns the cache off"
        ),
    )
    engine_kwargs: dict[str, Any] = Field(default_factory=dict, description="extra vLLM engine arguments")

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if ":" in v or not NAME.match(v):
            raise ValueError(f"base model id {v!r} must be a plain name without ':'")
        return v

    @field_validator("engine_kwargs")
    @classmethod
    def _engine(cls, v: dict[str, Any]) -> dict[str, Any]:
        reserved = {"model", "served_model_name", "enable_lora", "max_lora_rank", "max_loras", "max_model_len",
                    "mm_processor_cache_gb", "enable_tower_connector_lora", "worker_extension_cls"}
        clash = sorted(reserved & set(v))
        if clash:
            raise ValueError(f"engine_kwargs may not set {clash}: they come from the config's own fields")
        return v

    @property
    def float32_engine(self) -> bool:
        """Whether ``engine_kwargs`` ask vLLM for float32 (``dtype`` float32 or float). Unset or ``auto``
        serves a float32 checkpoint in 16 bits on a GPU."""
        return str(self.engine_kwargs.get("dtype", "")).lower() in ("float32", "float")

    def resolved_source(self) -> str:
        """Absolute path for repo-relative folders; anything else as given."""
        path = REPO_ROOT / self.source
        return str(path) if not Path(self.source).is_absolute() and path.exists() else self.source


class AdapterStoreSpec(SectionModel):
    """Where LoRA adapters live."""

    prefix: str = Field(description="s3://bucket/prefix holding one folder per adapter version (or file:///folder: a "
                                    "local folder, for the store's tools and tests; serving reads S3)")
    endpoint_url: str | None = Field(None, description="S3 endpoint (a local S3 server); None: AWS")
    region: str = Field("us-east-1", description="S3 region")
    resolve_ttl_s: float = Field(
        5.0, ge=0, description="seconds a resolved name -> version is reused by the gateway (0: every request reads S3)"
    )
    stale_if_error_s: float = Field(
        300.0, ge=0,
        description=("while S3 cannot be reached, seconds (since its last successful read) a name keeps resolving to "
                     "the version last read, so adapters a replica holds keep serving through a short outage; past "
                     "that, or for a name never read, requests answer 503 until S3 is back (0: no stale answers)"))
    parity_without_reference: bool = Field(
        False,
        description=("whether a parity check that could not compare a version with a reference (the base's weights "
                     "not readable where it was measured: it found only that the version's served output differs "
                     "from the base's; `parity not compared`) lets the version start serving (promote, canary, "
                     "rollback, push). Off: such a version is refused like one whose parity failed, until it is "
                     "measured against HF + peft or an admin forces it"))
    gate: GateSpec = Field(default_factory=GateSpec, description=(
        "the offline gate's policy (`maze-eval gate`): the false-promotion rate, the looks and the maze set by "
        "which a candidate version replaces the version a name serves; a default and per-name changes"))
    guard: GuardSpec = Field(default_factory=GuardSpec, description=(
        "the live guard's policy: how a running canary is judged on the session outcomes clients report "
        "(POST /v1/outcomes) and rolled back, or promoted where a name allows, on its own; a default and per-name "
        "changes"))

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if not re.fullmatch(r"s3://[a-z0-9][a-z0-9.-]{1,62}(/[^\s]*)?|file:///[^\s]*[^\s/][^\s]*", v):
            raise ValueError(f"adapter prefix must look like s3://bucket/prefix, got {v!r}")
        return v.rstrip("/")

    @property
    def bucket(self) -> str:
        """The S3 bucket (of an ``s3://`` prefix)."""
        return self.prefix[5:].split("/", 1)[0]

    @property
    def key_prefix(self) -> str:
        """The keys' prefix in the bucket (of an ``s3://`` prefix), ending in ``/`` unless empty."""
        rest = self.prefix[5:].split("/", 1)
        return rest[1] + "/" if len(rest) > 1 and rest[1] else ""


class LoraSpec(SectionModel):
    """LoRA limits."""

    max_rank: int = Field(32, description="largest adapter rank accepted (vLLM max_lora_rank)")
    adapters_per_replica: int = Field(1, ge=1, description="adapters resident per replica (= vLLM max_loras)")
    download_timeout_s: float = Field(60.0, gt=0, description="timeout to fetch one adapter")
    max_download_tries: int = Field(3, ge=1, description="download attempts")
    cpu_kernels: Literal["grouped", "vllm"] | None = Field(
        None,
        description=(
            "LoRA arithmetic of CPU engines. 'grouped': the kernels of serving.engine.lora_kernels (token rows "
            "grouped by adapter, two small matrix products per group), installed into the engine's worker through "
            "vLLM's worker_extension_cls; 'vllm': vLLM's own CPU ops, which copy the LoRA weights once per "
            "token, so their cost grows with tokens times weights (benchmarks/lora_parity.py --cpu-kernels vllm "
            "measures them against 'grouped'). Unset: 'grouped' on a CPU device. CPU only: a GPU config that sets "
            "it is refused (GPU engines run vLLM's own LoRA kernels)"
        ),
    )
    cpu_merged_slots: int = Field(
        0, ge=0, le=64,
        description=(
            "with the grouped kernels: adapter slots whose merged weights (base + B @ A per LoRA layer) a CPU engine "
            "keeps, so a step whose every token belongs to one adapter (one request, or an evaluation's batch) costs "
            "what the base's does; mixed batches keep the grouped kernels. Memory: a copy of the base's linear "
            "weights plus one merged copy of the adapted layers per slot. 0: off (serving.engine.lora_merge). "
            "CPU only: a GPU config with slots is refused"
        ),
    )

    vision_tower: bool = Field(
        False,
        description=(
            "apply adapters' LoRA modules in the vision tower and its merger too (vLLM's "
            "enable_tower_connector_lora, which the engine supports per architecture, Qwen3-VL among them). Off: "
            "only the language model's modules are applied, so an adapter with non-zero tower modules is refused "
            "at publish and at load rather than served without them; maze-train's default LoRA targets follow it"
        ),
    )

    @field_validator("max_rank")
    @classmethod
    def _rank(cls, v: int) -> int:
        if v not in VLLM_LORA_RANKS:
            raise ValueError(f"max_rank must be one of {VLLM_LORA_RANKS}, got {v}")
        return v


class ReplicaSpec(SectionModel):
    """Replicas and autoscaling of each base model's LLM deployment."""

    min_replicas: int = Field(1, ge=0, description="autoscaling floor")
    max_replicas: int = Field(1, ge=1, description="autoscaling ceiling")
    target_ongoing_requests: int = Field(16, ge=1, description="autoscaling target per replica")
    max_ongoing_requests: int = Field(64, ge=1, description="admission limit per replica")
    initial_replicas: int | None = Field(
        None, ge=0, description="replicas started on deploy when autoscaling (None: min_replicas)")
    resources: dict[str, float] = Field(
        default_factory=dict,
        description=(
            "custom Ray resources each LLM replica takes, e.g. {maze_replica: 1}: with nodes that offer one "
            "unit each, no node holds two replicas (placement is explicit, not left to the scheduler)"))
    ingress_replicas: int | None = Field(
        None, ge=1,
        description="ingress replicas (layout 'standard'), a fixed number; None: one when the LLM replicas are a "
                    "fixed number, else Ray Serve LLM's ingress autoscaling. Limits and usage hold across them "
                    "when auth.store is shared (redis)")
    ingress_resources: dict[str, float] = Field(
        default_factory=dict,
        description="custom Ray resources the ingress replica takes, e.g. {maze_head: 0.01} to keep it on the head")

    @model_validator(mode="after")
    def _order(self) -> ReplicaSpec:
        if self.max_replicas < self.min_replicas:
            raise ValueError("max_replicas must be >= min_replicas")
        if self.initial_replicas is not None and not self.min_replicas <= self.initial_replicas <= self.max_replicas:
            raise ValueError("initial_replicas must lie between min_replicas and max_replicas")
        return self


class RoutingSpec(SectionModel):
    """How requests for an adapter pick among the LLM replicas (serving.placement.router)."""

    policy: Literal["spread", "affinity"] = Field(
        "spread",
        description=(
            "'spread': an adapter's requests stay on the replicas holding it while one of them is below "
            "spread_threshold requests in flight, and go to the least busy replica of all (which loads it) "
            "once every holder is past it, so a hot adapter uses every replica; 'affinity': Ray Serve's "
            "default multiplexed routing, which leaves the holders only after their queues stay full "
            "(max_ongoing_requests) for its 1-2 s matching timeout"))
    spread_threshold: int = Field(
        4, ge=1,
        description=("requests in flight at which a replica holding an adapter counts as busy ('spread'); "
                     "low spreads sooner (more adapter loads), high keeps more affinity"))


class ServingConfig(SectionModel):
    """A whole gateway deployment."""

    name: str = Field(description="deployment name (RayService metadata.name)")
    device: Literal["cpu", "gpu"] = Field(description="where the engines run")
    base_models: list[BaseModelSpec] = Field(min_length=1, description="base models served")
    adapters: AdapterStoreSpec = Field(description="the S3 adapter store")
    lora: LoraSpec = Field(default_factory=LoraSpec, description="LoRA limits")
    replicas: ReplicaSpec = Field(default_factory=ReplicaSpec, description="replicas per base model")
    routing: RoutingSpec = Field(default_factory=RoutingSpec, description="adapter-aware replica choice")
    auth: AuthSpec = Field(default_factory=AuthSpec, description="auth")
    limits: LimitsSpec = Field(default_factory=LimitsSpec, description="request limits")
    layout: Literal["standard", "colocated"] = Field(
        "standard",
        description=(
            "'standard': an ingress deployment in front of one LLM-server deployment per base model "
            "(two Serve hops per request; ingress and engines scale apart). 'colocated': one deployment "
            "that answers HTTP and runs the engine in the same replica (one hop; one base model only). "
            "Same routes, auth, limits, errors, metrics and LoRA loading in both; see serving.ingress.colocated"
        ),
    )
    ingress: Literal["proxy", "direct"] = Field(
        "proxy",
        description=(
            "'proxy': Serve's HTTP proxy listens on `port` and forwards each request to the ingress "
            "replica (one more process hop). 'direct': Serve's direct ingress, the one colocated replica "
            "listens on `port` itself (client -> replica). Embedded stack only, with layout 'colocated' "
            "and one replica; see serving.ingress.direct"
        ),
    )
    host: str = Field("127.0.0.1", description="HTTP bind address")
    port: int = Field(8000, ge=1, le=65535, description="HTTP port")
    image: str = Field("maze-gateway/serve:latest", description="container image (k8s)")
    accelerator_type: str | None = Field(None, description="Ray accelerator type, e.g. H100 (gpu only)")
    env: dict[str, str] = Field(
        default_factory=dict,
        description="env vars for the engine processes (VLLM_CPU_* ones, read by vLLM's CPU backend alone, are "
                    "refused on a GPU device)")
    allocator: Literal["system", "jemalloc"] = Field(
        "system",
        description=(
            "memory allocator of the engine processes. 'jemalloc': preloaded where libjemalloc is installed "
            "(Debian: libjemalloc2), else glibc with a fixed mmap threshold; either keeps a long-running CPU "
            "engine's memory flat, jemalloc at less CPU per request. 'system': the image's malloc as is; "
            "see serving.engine.allocator. 'jemalloc' is for CPU engines: a GPU config with it is refused"
        ),
    )
    cpu_affinity: Literal["none", "split"] = Field(
        "none",
        description=(
            "where the embedded stack's processes run (CPU engines). 'split': the engine worker on its own "
            "cores (one per physical core, all but the last), Ray, Serve, the replica and the engine core on "
            "the rest, so nothing preempts a forward pass; 'none': every process on every core. Embedded "
            "stack only; see serving.engine.cpu_affinity"
        ),
    )
    extensions: list[str] = Field(
        default_factory=list,
        description="import paths 'module:attr' of FastAPI APIRouters mounted on the gateway (same auth and limits)",
    )
    stream_batching_ms: float | None = Field(
        None, ge=0,
        description=(
            "Ray Serve LLM's stream batching interval (LLMConfig experimental_configs stream_batching_interval_ms): "
            "a replica sends a stream's chunks together every this many ms, so a first token waits up to one "
            "interval before it leaves (the Server-Timing header's `batch`). 0: each chunk leaves as it comes; "
            "None: Ray's default (50 ms)"
        ),
    )

    @field_validator("extensions")
    @classmethod
    def _extensions(cls, v: list[str]) -> list[str]:
        bad = [e for e in v if not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", e)]
        if bad:
            raise ValueError(f"extensions must be 'module:attribute' import paths, got {bad}")
        return v

    @model_validator(mode="after")
    def _unique_ids(self) -> ServingConfig:
        ids = [m.id for m in self.base_models]
        if len(ids) != len(set(ids)):
            raise ValueError(f"base model ids must be unique: {ids}")
        if self.layout == "colocated" and len(ids) != 1:
            raise ValueError(f"layout 'colocated' serves exactly one base model, got {ids}; use 'standard'")
        if self.ingress == "direct" and (self.layout != "colocated" or self.replicas.max_replicas != 1):
            raise ValueError("ingress 'direct' needs layout 'colocated' and max_replicas 1: one replica owns the port")
        return self

    @model_validator(mode="after")
    def _cpu_only(self) -> ServingConfig:
        """Refuse the settings that only a CPU engine reads on a GPU config: each would be dropped (or, the
        allocator, preloaded into a GPU engine) with nothing telling the user."""
        if self.device != "gpu":
            return self
        cpu_env = sorted(k for k in self.env if k.startswith("VLLM_CPU_"))
        found = [text for applies, text in (
            (self.lora.cpu_kernels is not None, f"lora.cpu_kernels {self.lora.cpu_kernels!r} picks a CPU engine's "
                                                "LoRA arithmetic (GPU engines run vLLM's own LoRA kernels)"),
            (self.lora.cpu_merged_slots > 0, "lora.cpu_merged_slots keeps merged weights for the grouped CPU kernels"),
            (self.cpu_affinity == "split", "cpu_affinity 'split' places a CPU engine's worker"),
            (self.allocator == "jemalloc", "allocator 'jemalloc' preloads a CPU engine's malloc"),
            (bool(cpu_env), f"env {cpu_env} is read by vLLM's CPU backend alone"),
        ) if applies]
        if found:
            raise ValueError(f"this config's device is 'gpu', and it sets what only a CPU engine uses: "
                             f"{'; '.join(found)}. Remove these settings (docs/gpu.md, 'CPU-only settings')")
        return self

    @model_validator(mode="after")
    def _gpu_lora_dtype(self) -> ServingConfig:
        """Refuse a float32 base on a GPU config: vLLM's GPU LoRA kernels take 16-bit inputs only, and the
        engine fails its start-up profile run, which Ray Serve retries for minutes before giving up."""
        if self.device != "gpu":
            return self
        wide = [m.id for m in self.base_models if m.float32_engine]
        if wide:
            raise ValueError(f"base model(s) {wide} set engine_kwargs dtype float32 on a GPU config: vLLM's GPU LoRA "
                             "kernels take float16 or bfloat16 only, and the engine would fail to start. Use dtype "
                             "bfloat16 (or auto, which serves a float32 checkpoint in 16 bits on a GPU)")
        return self

    @model_validator(mode="after")
    def _safe(self) -> ServingConfig:
        """Refuse the two configs that start fine and are unsafe: management routes open to the network,
        and per-key limits that silently hold once per ingress replica."""
        if not self.auth.enabled and not self.auth.open and not is_loopback(self.host):
            raise ValueError(
                f"auth is off and host is {self.host!r}: anyone who reaches the port could call every model and "
                "push, promote and delete adapters. Set auth.keys_file (or auth.keys_env, auth.api_keys_env), "
                "or host: 127.0.0.1, or auth: {open: true} to serve without keys on purpose")
        if self.auth.enabled and self.auth.store.kind == "memory" and self.several_ingress_replicas:
            raise ValueError(
                "auth.store.kind 'memory' counts each ingress replica's requests on its own, so with several "
                "ingress replicas every key limit would hold once per replica: set auth.store: {kind: redis} "
                "(shared by the replicas), or run one ingress replica (replicas.ingress_replicas: 1 with layout "
                "'standard', max_replicas: 1 with layout 'colocated')")
        return self

    @property
    def several_ingress_replicas(self) -> bool:
        """Whether more than one replica may answer HTTP (serving.app's ingress deployment config): with
        ``colocated`` the LLM replicas themselves; with ``standard`` ``ingress_replicas``, else one for a
        fixed LLM replica count and Ray Serve LLM's ingress autoscaling otherwise."""
        r = self.replicas
        if self.layout == "colocated":
            return r.max_replicas > 1
        if r.ingress_replicas is not None:
            return r.ingress_replicas > 1
        return r.min_replicas != r.max_replicas

    @property
    def cpu_lora_kernels(self) -> Literal["grouped", "vllm"] | None:
        """The CPU engines' LoRA arithmetic (``lora.cpu_kernels``, 'grouped' when unset); None on a GPU device."""
        if self.device != "cpu":
            return None
        return self.lora.cpu_kernels or "grouped"

    @property
    def grouped_cpu_lora(self) -> bool:
        """Whether the engines get the grouped CPU LoRA kernels (serving.engine.lora_kernels)."""
        return self.cpu_lora_kernels == "grouped"

    @classmethod
    def from_file(cls, path: str | Path) -> ServingConfig:
        return cls.model_validate(yaml.safe_load(Path(path).read_text()))

    @classmethod
    def shipped(cls, name: str) -> ServingConfig:
        """A config from ``serving/configs/<name>.yaml`` (``embedded`` or ``production``)."""
        path = CONFIG_DIR / f"{name}.yaml"
        if not path.exists():
            known = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
            raise ValueError(f"no shipped serving config {name!r}; known: {known}")
        return cls.from_file(path)

    def base(self, model_id: str) -> BaseModelSpec | None:
        return next((m for m in self.base_models if m.id == model_id), None)


def load_config(name_or_path: str | None) -> ServingConfig:
    """A shipped config name, a YAML path, or (None) the embedded default."""
    if name_or_path is None:
        return ServingConfig.shipped("embedded")
    if Path(name_or_path).suffix in (".yaml", ".yml") or "/" in name_or_path:
        return ServingConfig.from_file(name_or_path)
    return ServingConfig.shipped(name_or_path)


__all__ = [
    "CONFIG_DIR", "MIN_SECRET_LENGTH", "REPO_ROOT",
    "AdapterStoreSpec", "AgentProfileSpec", "ApiKeySpec", "AuthSpec", "BaseModelSpec", "GatePolicy", "GateSpec",
    "GuardPolicy", "GuardSpec",
    "KeyFileSpec",
    "KeyLimitsSpec", "LimitsSpec", "LoraSpec", "RateStoreSpec", "ReplicaSpec", "Role", "RoutingSpec",
    "ServingConfig", "load_config",
]
