"""Runner messages as token ids and M-RoPE positions, exactly as the chat template and processor make them.

Prompts are the runner's messages with ``frame:<id>`` image URLs (:mod:`~training.tiny.fastpath.frames`),
rendered by the model's own chat template and expanded like the processor does, memoized by their
texts (:class:`PromptCodec`).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent.protocol import Message


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
