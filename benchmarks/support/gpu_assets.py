"""A Qwen3-VL-8B-shaped model folder and random LoRA adapters for it, for the GPU benchmarks.

No weights can be downloaded on the GPU machine, and speed does not depend on their values: the folder
holds Qwen3-VL-8B-Instruct's public architecture numbers and a tokenizer, and vLLM builds random
weights for it (``load_format: dummy``). The tokenizer is maze-tiny's (the same chat template and
image tokens) with its vocabulary padded to the 8B model's 151,936 ids: random weights sample ids far
beyond maze-tiny's 540, and an id the tokenizer does not know decodes to nothing, so a stream would
carry no text and its first token could not be timed. Real text tokenizes as with maze-tiny.

The adapters are peft folders in maze-grpo's key naming, with random A and B matrices of the given
rank on the language model's linear layers (maze-train's default targets): an adapter's cost in the
engine depends on its rank and targets, not on its values.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from serving.config import REPO_ROOT

TINY = REPO_ROOT / "models" / "maze-tiny"
GRPO = REPO_ROOT / "models" / "maze-grpo"
VOCAB = 151_936
HIDDEN, INTERMEDIATE, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 4096, 12288, 36, 32, 8, 128
# Qwen3-VL-8B-Instruct's image-size limits (maze-tiny fixes its images at 224 x 224).
IMAGE_SIZE = {"longest_edge": 16_777_216, "shortest_edge": 65_536}


def qwen3vl_8b_config() -> dict:
    """Qwen3-VL-8B-Instruct's ``config.json`` numbers, with maze-tiny's special-token ids."""
    text = {
        "model_type": "qwen3_vl_text", "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 533, "eos_token_id": 535, "pad_token_id": 533, "dtype": "bfloat16",
        "head_dim": HEAD_DIM, "hidden_act": "silu", "hidden_size": HIDDEN, "initializer_range": 0.02,
        "intermediate_size": INTERMEDIATE, "max_position_embeddings": 262_144,
        "num_attention_heads": HEADS, "num_hidden_layers": LAYERS, "num_key_value_heads": KV_HEADS,
        "rms_norm_eps": 1e-06, "tie_word_embeddings": False, "use_cache": True, "vocab_size": VOCAB,
        "rope_parameters": {"mrope_interleaved": True, "mrope_section": [24, 20, 20],
                            "rope_theta": 5_000_000.0, "rope_type": "default"},
    }
    vision = {
        "model_type": "qwen3_vl_vision", "deepstack_visual_indexes": [8, 16, 24], "depth": 27,
        "dtype": "bfloat16", "hidden_act": "gelu_pytorch_tanh", "hidden_size": 1152, "in_channels": 3,
        "initializer_range": 0.02, "intermediate_size": 4304, "num_heads": 16,
        "num_position_embeddings": 2304, "out_hidden_size": HIDDEN, "patch_size": 16,
        "spatial_merge_size": 2, "temporal_patch_size": 2,
    }
    return {"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
            "dtype": "bfloat16", "image_token_id": 538, "video_token_id": 539,
            "vision_start_token_id": 536, "vision_end_token_id": 537, "tie_word_embeddings": False,
            "text_config": text, "vision_config": vision}


def qwen3vl_8b_folder(dst: Path) -> Path:
    """Write the 8B-shaped model folder (config, processor files, padded tokenizer; no weights)."""
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "config.json").write_text(json.dumps(qwen3vl_8b_config(), indent=2))
    for name in ("chat_template.jinja", "tokenizer_config.json", "generation_config.json",
                 "video_preprocessor_config.json"):
        shutil.copy(TINY / name, dst / name)
    pre = json.loads((TINY / "preprocessor_config.json").read_text())
    pre["size"] = IMAGE_SIZE
    (dst / "preprocessor_config.json").write_text(json.dumps(pre, indent=2))
    proc = json.loads((TINY / "processor_config.json").read_text())
    proc["image_processor"]["size"] = IMAGE_SIZE
    (dst / "processor_config.json").write_text(json.dumps(proc, indent=2))
    tok = json.loads((TINY / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    for added in tok["added_tokens"]:  # the specials in the model vocabulary too, else they are renumbered
        vocab[added["content"]] = added["id"]
    taken = set(vocab.values())
    vocab.update({f"q{i}z": i for i in range(VOCAB) if i not in taken})
    (dst / "tokenizer.json").write_text(json.dumps(tok))
    return dst


def lm_linear_shapes() -> dict[str, tuple[int, int]]:
    """(in, out) of each linear layer of one language-model block, by its peft module path."""
    kv = KV_HEADS * HEAD_DIM
    return {"self_attn.q_proj": (HIDDEN, HEADS * HEAD_DIM), "self_attn.k_proj": (HIDDEN, kv),
            "self_attn.v_proj": (HIDDEN, kv), "self_attn.o_proj": (HEADS * HEAD_DIM, HIDDEN),
            "mlp.gate_proj": (HIDDEN, INTERMEDIATE), "mlp.up_proj": (HIDDEN, INTERMEDIATE),
            "mlp.down_proj": (INTERMEDIATE, HIDDEN)}


def random_adapter(dst: Path, base_dir: Path, rank: int, seed: int) -> Path:
    """A peft LoRA folder of ``rank`` on every language-model linear layer, random weights (bf16)."""
    import torch
    from safetensors.torch import save_file

    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator(device=device).manual_seed(seed)
    tensors = {}
    for layer in range(LAYERS):
        for module, (fan_in, fan_out) in lm_linear_shapes().items():
            key = f"base_model.model.model.language_model.layers.{layer}.{module}"
            a = torch.randn(rank, fan_in, generator=gen, device=device) / fan_in ** 0.5
            b = torch.randn(fan_out, rank, generator=gen, device=device) * 0.01
            tensors[f"{key}.lora_A.weight"] = a.to(torch.bfloat16).cpu()
            tensors[f"{key}.lora_B.weight"] = b.to(torch.bfloat16).cpu()
    dst.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(dst / "adapter_model.safetensors"))
    cfg = json.loads((GRPO / "adapter_config.json").read_text())
    cfg.update({"r": rank, "lora_alpha": 2 * rank, "base_model_name_or_path": str(base_dir),
                "target_modules": sorted({m.split(".")[-1] for m in lm_linear_shapes()})})
    (dst / "adapter_config.json").write_text(json.dumps(cfg, indent=2))
    return dst
