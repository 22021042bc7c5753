"""A batched Qwen3-VL forward, the fast path's model side.

HF's Qwen3-VL forward (without flash-attention) loops over images in Python for vision
attention and position ids, which dominates the cost of a model this small. Every maze image
has the same size, so :class:`FastQwen3VL` runs the vision tower batched over images (one SDPA
call per layer) and the text model with precomputed M-RoPE position ids, through the model's own
modules, so LoRA layers wrapped by peft are used too. ``tests/training`` checks it against HF's
forward.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from training.tiny.fastpath.frames import FrameBank
from training.tiny.fastpath.prompts import EncodedPrompt


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class FastQwen3VL:
    """Batched forward of a (possibly peft-wrapped) ``Qwen3VLForConditionalGeneration``."""

    def __init__(self, model: torch.nn.Module, grid_thw: tuple[int, int, int]):
        from transformers.vision_utils import get_vision_interpolation_indices_and_weights, get_vision_position_ids

        self.model = model
        core = self._core(model)
        self.visual, self.lm, self.lm_head = core.model.visual, core.model.language_model, core.lm_head
        self.image_token_id = core.config.image_token_id
        v = self.visual
        g = torch.tensor([grid_thw])
        idx, w = get_vision_interpolation_indices_and_weights(
            g, num_grid_per_side=v.num_grid_per_side, mode=v.interpolation_mode,
            align_corners=v.interpolation_align_corners, spatial_merge_size=v.config.spatial_merge_size,
        )
        pos_ids = get_vision_position_ids(g, v.spatial_merge_size)
        dev = v.pos_embed.weight.device
        self.interp_idx, self.interp_w = idx.to(dev), w.to(dev)
        cos, sin = v.rotary_pos_emb(torch.zeros(1, device=dev), pos_ids.to(dev))
        self.vcos, self.vsin = cos.float(), sin.float()  # (P, head_dim)

    @staticmethod
    def _core(model):
        # A peft PeftModel wraps the HF model; its LoRA layers live inside the HF modules.
        return model.get_base_model() if hasattr(model, "get_base_model") else model

    def encode_images(self, pixels: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """(U, P, C) pixel patches -> merged tokens (U, P/4, H) and deepstack features."""
        v = self.visual
        U, P, C = pixels.shape
        x = v.patch_embed(pixels.reshape(U * P, C))
        D = x.shape[-1]
        pos = (v.pos_embed(self.interp_idx) * self.interp_w[:, :, None]).sum(1)
        x = (x.view(U, P, D) + pos.to(x.dtype)).view(U, P, D)
        deep = []
        for i, blk in enumerate(v.blocks):
            h = blk.norm1(x)
            nh = blk.attn.num_heads
            q, k, val = blk.attn.qkv(h).view(U, P, 3, nh, -1).permute(2, 0, 3, 1, 4).unbind(0)
            dt = q.dtype
            qf, kf = q.float(), k.float()
            q = (qf * self.vcos + _rotate_half(qf) * self.vsin).to(dt)
            k = (kf * self.vcos + _rotate_half(kf) * self.vsin).to(dt)
            o = F.scaled_dot_product_attention(q, k, val, scale=blk.attn.scaling)
            x = x + blk.attn.proj(o.transpose(1, 2).reshape(U, P, D))
            x = x + blk.mlp(blk.norm2(x))
            if i in v.deepstack_visual_indexes:
                merger = v.deepstack_merger_list[v.deepstack_visual_indexes.index(i)]
                deep.append(merger(x.reshape(U * P, D)))
        merged = v.merger(x.reshape(U * P, D))
        per = merged.shape[0] // U
        return merged.view(U, per, -1), [d.view(U, per, -1) for d in deep]

    def vision(self, frames: torch.Tensor, bank: FrameBank) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
        """Encode each distinct frame once: (merged, deepstack, inverse index per image)."""
        uniq, inv = torch.unique(frames.to(bank.pixels.device), return_inverse=True)
        merged, deep = self.encode_images(bank[uniq])
        return merged, deep, inv

    def hidden(self, input_ids: torch.Tensor, pos: torch.Tensor, vis: tuple) -> torch.Tensor:
        """Last hidden states (B, L, H).

        Args:
            input_ids: (B, L), right-padded (so causal attention needs no mask).
            pos: (3, B, L) M-RoPE positions.
            vis: :meth:`vision` of the frame ids of the images, in the order their tokens appear.
        """
        return self._text(input_ids, pos, vis, use_cache=False).last_hidden_state

    def prefill(self, input_ids: torch.Tensor, pos: torch.Tensor, vis: tuple) -> tuple[torch.Tensor, Any]:
        """:meth:`hidden` that also returns the KV cache, for :meth:`decode` to extend."""
        out = self._text(input_ids, pos, vis, use_cache=True)
        return out.last_hidden_state, out.past_key_values

    def _text(self, input_ids: torch.Tensor, pos: torch.Tensor, vis: tuple, use_cache: bool):
        merged, deep, inv = vis
        emb = self.lm.embed_tokens(input_ids)
        mask = input_ids == self.image_token_id
        img = merged[inv].reshape(-1, merged.shape[-1]).to(emb.dtype)
        emb = emb.masked_scatter(mask[..., None], img)
        deep = [d[inv].reshape(-1, d.shape[-1]) for d in deep]
        return self.lm(inputs_embeds=emb, position_ids=pos, attention_mask=None,
                       visual_pos_masks=mask, deepstack_visual_embeds=deep or None, use_cache=use_cache)

    def decode(self, tokens: torch.Tensor, pos: torch.Tensor, cache: Any, keep: torch.Tensor) -> torch.Tensor:
        """Hidden states (B, H) of one new text token per row, appended to ``cache``.

        Args:
            tokens: (B,) token ids; pos: (3, B) their M-RoPE positions.
            keep: (B, kv_len) bool, the cached columns (plus this token's) each row may attend to:
                a right-padded prefill leaves pad columns between a short prompt and its new tokens.
        """
        emb = self.lm.embed_tokens(tokens[:, None])
        out = self.lm(inputs_embeds=emb, position_ids=pos[:, :, None], attention_mask=keep[:, None, None, :],
                      past_key_values=cache, use_cache=True)
        return out.last_hidden_state[:, 0]

    def logits_at(self, hidden: torch.Tensor, flat_index: torch.Tensor) -> torch.Tensor:
        """Logits at flattened (b * L + t) positions only (the vocabulary head is the big matmul)."""
        return self.lm_head(hidden.reshape(-1, hidden.shape[-1])[flat_index]).float()


def collate(prompts: list[EncodedPrompt], frames: list[list[int]], replies: list[list[int]] | None = None,
            pad_id: int = 0) -> dict[str, torch.Tensor]:
    """Right-padded batch of prompts (+ optional reply tokens appended, for teacher forcing).

    Returns input_ids (B, L), pos (3, B, L), frames (N,), last (B,) index of each prompt's last
    token, and with replies: tgt_index (M,) flat positions predicting tgt_ids (M,), tgt_sample (M,).
    """
    B = len(prompts)
    lens = [len(p.ids) + (len(replies[i]) - 1 if replies else 0) for i, p in enumerate(prompts)]
    L = max(lens)
    ids = np.full((B, L), pad_id, dtype=np.int64)
    pos = np.zeros((3, B, L), dtype=np.int64)
    last = np.zeros(B, dtype=np.int64)
    ti, tt, ts = [], [], []
    for b, p in enumerate(prompts):
        n = len(p.ids)
        ids[b, :n] = p.ids
        pos[:, b, :n] = p.pos
        last[b] = b * L + n - 1
        if replies:
            r = replies[b]
            k = len(r) - 1  # the last target (<|im_end|>) is predicted but never fed back
            ids[b, n : n + k] = r[:k]
            pos[:, b, n : n + k] = p.next_pos + np.arange(k)
            ti.extend(b * L + n - 1 + np.arange(len(r)))
            tt.extend(r)
            ts.extend([b] * len(r))
    out = {
        "input_ids": torch.from_numpy(ids),
        "pos": torch.from_numpy(pos),
        "frames": torch.as_tensor([f for fs in frames for f in fs], dtype=torch.long),
        "last": torch.from_numpy(last),
    }
    if replies:
        out |= {"tgt_index": torch.as_tensor(ti), "tgt_ids": torch.as_tensor(tt), "tgt_sample": torch.as_tensor(ts)}
    return out
