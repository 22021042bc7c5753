"""The fast training path: prompts as token ids + frame ids, and a batched Qwen3-VL forward.

HF's Qwen3-VL forward (without flash-attention) loops over images in Python for vision
attention and position ids, which dominates the cost of a model this small. Every maze image
has the same size, so here:

* a maze frame is an integer id into :class:`FrameCatalog` (every 7x7 maze x goal corner x agent
  cell: 13,056 frames), and its pixel values come from the model's own HF image processor once
  (:class:`FrameBank`), so training sees exactly the tensors inference sees;
* prompts are the runner's messages with ``frame:<id>`` image URLs, rendered by the model's own
  chat template and expanded like the processor does, memoized by their texts
  (:class:`PromptCodec`);
* :class:`FastQwen3VL` runs the vision tower batched over images (one SDPA call per layer) and
  the text model with precomputed M-RoPE position ids, through the model's own modules, so LoRA
  layers wrapped by peft are used too. ``tests/training`` checks it against HF's forward.
"""

from __future__ import annotations

import copy
import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from agent.maze import MazeLayout, corners, generate_from_seed, png_data_url, render_frame
from agent.protocol import Message

log = logging.getLogger(__name__)

FRAME_URL_PREFIX = "frame:"


# -- frames ----------------------------------------------------------------------------------
class FrameCatalog:
    """Every frame of a ``size x size`` maze variant, numbered deterministically.

    A perfect maze on a 3x3 room grid is a spanning tree of it (192 of them); with 4 goal corners
    and the agent on any floor cell that is 13,056 frames for ``maze_2d/simple``.
    """

    def __init__(self, size: int = 7, search_seeds: int = 20000):
        self.size = size
        grids: dict[bytes, np.ndarray] = {}
        for seed in range(search_seeds):
            g = generate_from_seed(size, size, seed).grid
            grids.setdefault(g.tobytes(), g)
        self.grids = [grids[k] for k in sorted(grids)]
        self._grid_index = {g.tobytes(): i for i, g in enumerate(self.grids)}
        s = size
        self.corners = ((1, 1), (s - 2, s - 2), (s - 2, 1), (1, s - 2))
        keys: list[tuple[int, int, int, int]] = []
        for m, g in enumerate(self.grids):
            for c in range(4):
                for r, col in zip(*np.nonzero(g == 0)):
                    keys.append((m, c, int(r), int(col)))
        self.keys = keys
        self._row = {k: i for i, k in enumerate(keys)}
        log.info("frame catalog %dx%d: %d mazes, %d frames", size, size, len(self.grids), len(keys))

    def __len__(self) -> int:
        return len(self.keys)

    def row(self, grid: np.ndarray, agent: tuple[int, int], goal: tuple[int, int]) -> int:
        """The frame id of a state (KeyError for a maze outside the catalog)."""
        m = self._grid_index[np.ascontiguousarray(grid, dtype=np.int8).tobytes()]
        return self._row[(m, self.corners.index(tuple(goal)), int(agent[0]), int(agent[1]))]

    def tasks(self) -> list[MazeLayout]:
        """Every task of this size: each maze with each corner choice (start and goal in opposite
        corners, as ``agent.maze.corners``), mazes in catalog order; 768 for ``maze_2d/simple``."""
        s = self.size
        return [MazeLayout(grid=g, start=st, goal=gl) for g in self.grids for st, gl in (corners(s, s, i) for i in range(4))]

    def frame(self, row: int) -> np.ndarray:
        m, c, r, col = self.keys[row]
        return render_frame(self.grids[m], (r, col), self.corners[c])


def frame_url(row: int) -> str:
    return f"{FRAME_URL_PREFIX}{row}"


def frame_rows(messages: list[Message]) -> list[int]:
    """Frame ids of the images in ``messages``, in order."""
    rows = []
    for msg in messages:
        if isinstance(msg["content"], list):
            for part in msg["content"]:
                if part.get("type") == "image_url":
                    rows.append(int(part["image_url"]["url"][len(FRAME_URL_PREFIX):]))
                elif part.get("type") == "image":  # the form apply_chat_template rewrites parts to
                    rows.append(int(part["url"][len(FRAME_URL_PREFIX):]))
    return rows


def to_openai_messages(messages: list[Message], catalog: FrameCatalog) -> list[Message]:
    """Replace ``frame:<id>`` URLs by the PNG data URLs the runner sends."""
    out = []
    for msg in messages:
        if not isinstance(msg["content"], list):
            out.append(msg)
            continue
        parts = []
        for part in msg["content"]:
            if part.get("type") == "image_url" and part["image_url"]["url"].startswith(FRAME_URL_PREFIX):
                row = int(part["image_url"]["url"][len(FRAME_URL_PREFIX):])
                part = {"type": "image_url", "image_url": {"url": png_data_url(catalog.frame(row))}}
            parts.append(part)
        out.append({**msg, "content": parts})
    return out


class FrameBank:
    """Pixel values (as the model's image processor makes them) for catalog frames, on a device.

    On a GPU the processor itself runs there (torchvision ops on CUDA tensors): 13k frames take
    seconds instead of minutes; pixels can then differ from the CPU path by a rounding step at
    cell edges (measured by ``training.tiny.gpu_check``).

    Frames are processed on first use, in batches, and stored in a growing table, so a CPU test
    touches only the few it needs; :meth:`fill` with no rows processes the whole catalog.

    A frame is 196 patches x 1536 values: 1.2 MB in float32, 15.7 GB for the whole catalog. So on
    CPU the table holds at most ``max_frames`` (default 2048, 2.4 GB): when a request would pass
    that, the table is emptied and refilled with what is asked (processing a frame costs ~2 ms on
    CPU, the model far more). A whole-catalog :meth:`fill` is never capped.
    """

    CPU_MAX_FRAMES = 2048

    def __init__(self, catalog: FrameCatalog, image_processor: Any, device: str | torch.device, dtype=torch.bfloat16,
                 max_frames: int | None = None):
        """``max_frames``: None for the device's default (CPU_MAX_FRAMES on CPU, no cap on a GPU), 0 for no cap."""
        self.catalog = catalog
        if max_frames is None:
            max_frames = self.CPU_MAX_FRAMES if torch.device(device).type == "cpu" else 0
        self.max_frames = max_frames
        self.image_processor = image_processor
        self.device = torch.device(device)
        self.dtype = dtype
        probe = image_processor(images=[catalog.frame(0)], return_tensors="pt")
        self.grid_thw = tuple(int(v) for v in probe["image_grid_thw"][0])
        self.patches, self.dim = probe["pixel_values"].shape
        self.slot = torch.full((len(catalog),), -1, dtype=torch.long)  # catalog row -> table slot
        self.pixels = torch.zeros(0, self.patches, self.dim, dtype=dtype, device=self.device)
        self._slot_dev = self.slot.to(self.device)

    def fill(self, rows: list[int] | None = None, chunk: int = 128) -> None:
        """Process the given frames (all when None) that are not processed yet."""
        todo = torch.arange(len(self.catalog)) if rows is None else torch.as_tensor(sorted(set(rows)), dtype=torch.long)
        missing = todo[self.slot[todo] < 0].tolist()
        if not missing:
            return
        held = self.pixels.shape[0]
        if rows is not None and self.max_frames and held and held + len(missing) > self.max_frames:
            self.slot[:] = -1  # start over with only what this request needs
            self.pixels = torch.zeros(0, self.patches, self.dim, dtype=self.dtype, device=self.device)
            missing = todo.tolist()
        todo = missing
        n0 = self.pixels.shape[0]
        grown = torch.zeros(n0 + len(todo), self.patches, self.dim, dtype=self.dtype, device=self.device)
        grown[:n0] = self.pixels
        for i in range(0, len(todo), chunk):
            part = todo[i : i + chunk]
            kw = {"device": self.device} if self.device.type == "cuda" else {}
            out = self.image_processor(images=[self.catalog.frame(r) for r in part], return_tensors="pt", **kw)
            px = out["pixel_values"].view(len(part), self.patches, self.dim)
            grown[n0 + i : n0 + i + len(part)] = px.to(device=self.device, dtype=self.dtype)
        self.slot[todo] = torch.arange(n0, n0 + len(todo))
        self.pixels = grown
        self._slot_dev = self.slot.to(self.device)

    def __getitem__(self, rows: torch.Tensor) -> torch.Tensor:
        slots = self._slot_dev[rows.to(self.device)]
        if bool((slots < 0).any()):
            self.fill(rows.cpu().tolist())
            slots = self._slot_dev[rows.to(self.device)]
        return self.pixels[slots]


# -- prompts ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class EncodedPrompt:
    ids: np.ndarray  # (L,) token ids, image pads expanded
    pos: np.ndarray  # (3, L) M-RoPE positions
    next_pos: int  # position of the first generated token


class PromptCodec:
    """Runner messages -> token ids and M-RoPE positions, exactly as chat template + processor do."""

    def __init__(self, processor: Any, tokens_per_image: int, merged_side: int):
        self.tokenizer = processor.tokenizer
        self.processor = processor
        self.tokens_per_image = tokens_per_image
        self.side = merged_side
        tok = self.tokenizer
        self.image_token = processor.image_token if hasattr(processor, "image_token") else "<|image_pad|>"
        self.image_token_id = tok.convert_tokens_to_ids(self.image_token)
        self.eos_id = tok.convert_tokens_to_ids("<|im_end|>")
        # Control tokens a reply must never contain: a sampled <|image_pad|> would be taken for an
        # image position on the next forward (and on CUDA read past the image embeddings).
        vocab = tok.get_vocab()
        self.banned_ids = [vocab[t] for t in ("<|endoftext|>", "<|im_start|>", "<|vision_start|>", "<|vision_end|>",
                                              "<|image_pad|>", "<|video_pad|>") if t in vocab]
        self._prompts: dict[tuple, EncodedPrompt] = {}
        self._replies: dict[str, list[int]] = {}

    @staticmethod
    def _key(messages: list[Message]) -> tuple:
        key = []
        for m in messages:
            c = m["content"]
            if isinstance(c, str):
                key.append((m["role"], c))
            else:
                key.append((m["role"], tuple(p["text"] if p["type"] == "text" else None for p in c)))
        return tuple(key)

    def encode(self, messages: list[Message]) -> EncodedPrompt:
        """The generation prompt for ``messages`` (memoized on their texts)."""
        key = self._key(messages)
        hit = self._prompts.get(key)
        if hit is None:
            # apply_chat_template rewrites image parts in place: give it a copy
            text = self.processor.apply_chat_template(copy.deepcopy(messages), tokenize=False, add_generation_prompt=True)
            text = text.replace(self.image_token, self.image_token * self.tokens_per_image)
            ids = np.asarray(self.tokenizer(text, add_special_tokens=False)["input_ids"], dtype=np.int64)
            pos, nxt = self.positions(ids)
            hit = self._prompts[key] = EncodedPrompt(ids, pos, nxt)
        return hit

    def reply_ids(self, text: str) -> list[int]:
        """Target ids of an assistant reply: its tokens, then ``<|im_end|>``."""
        ids = self._replies.get(text)
        if ids is None:
            ids = self._replies[text] = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.eos_id]
        return ids

    def positions(self, ids: np.ndarray) -> tuple[np.ndarray, int]:
        """Qwen3-VL's M-RoPE positions: text counts up; an image block spans its merged grid."""
        pos = np.zeros((3, len(ids)), dtype=np.int64)
        is_img = ids == self.image_token_id
        cur, i, n = 0, 0, len(ids)
        rr, cc = np.divmod(np.arange(self.tokens_per_image), self.side)
        while i < n:
            if is_img[i]:
                j = i + self.tokens_per_image
                pos[0, i:j] = cur
                pos[1, i:j] = cur + rr
                pos[2, i:j] = cur + cc
                cur += self.side
                i = j
            else:
                j = i
                while j < n and not is_img[j]:
                    j += 1
                pos[:, i:j] = cur + np.arange(j - i)
                cur += j - i
                i = j
        return pos, cur


def make_codec(processor: Any) -> PromptCodec:
    """The :class:`PromptCodec` of a Qwen3-VL processor (image tokens from its size and patching)."""
    ip = processor.image_processor
    side = ip.size["longest_edge"] if isinstance(ip.size, dict) else ip.size.longest_edge
    merged = math.isqrt(side) // (ip.patch_size * ip.merge_size)
    return PromptCodec(processor, merged * merged, merged)


# -- batched forward -------------------------------------------------------------------------
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
