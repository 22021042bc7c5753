"""An HF transformers policy for ``agent.runner``, batching the turns of concurrent episodes.

The runner plays episodes as concurrent coroutines; :class:`HFPolicy` collects the requests of
every episode that is waiting for a reply and answers them with one left-padded
``model.generate`` call: the chat template and image processor of the model folder, on the PNG
images the runner sends (decoded from their data: URLs), exactly as a server would see them.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from agent.maze import decode_data_url
from agent.protocol import Message
from agent.runner import EpisodeRecord, PolicyReply, RunnerConfig, SamplingParams, run_episodes_async

log = logging.getLogger(__name__)


def message_images(messages: list[Message]) -> list:
    """The images of ``messages``, decoded (also parts that apply_chat_template rewrote in place)."""
    urls = []
    for msg in messages:
        if isinstance(msg["content"], list):
            for part in msg["content"]:
                if part.get("type") == "image_url":
                    urls.append(part["image_url"]["url"])
                elif part.get("type") == "image":
                    urls.append(part["url"])
    return [decode_data_url(u) for u in urls]


class HFPolicy:
    """A runner policy over an HF (or peft-wrapped) Qwen-VL model."""

    def __init__(self, model: Any, processor: Any, label: str = "hf", max_batch: int = 64):
        self.model = model
        self.processor = processor
        self.label = label
        self.max_batch = max_batch
        self._pending: list[tuple[list[Message], SamplingParams, asyncio.Future]] = []
        self._flusher: asyncio.Task | None = None

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> PolicyReply:
        fut = asyncio.get_running_loop().create_future()
        self._pending.append((messages, sampling, fut))
        if self._flusher is None:
            self._flusher = asyncio.ensure_future(self._flush())
        return await fut

    async def _flush(self) -> None:
        # Let every episode that is ready submit its turn before generating.
        seen = -1
        while seen != len(self._pending):
            seen = len(self._pending)
            await asyncio.sleep(0)
        batch, self._pending, self._flusher = self._pending, [], None
        for i in range(0, len(batch), self.max_batch):
            part = batch[i : i + self.max_batch]
            try:
                texts = self.generate([m for m, _, _ in part], part[0][1])
            except Exception as exc:  # noqa: BLE001 - hand the failure to every waiting episode
                for _, _, fut in part:
                    fut.set_exception(exc)
                continue
            for (_, _, fut), text in zip(part, texts):
                fut.set_result(PolicyReply(text=text))

    @torch.no_grad()
    def generate(self, batch: list[list[Message]], sampling: SamplingParams) -> list[str]:
        """One reply per conversation, generated together."""
        proc = self.processor
        # apply_chat_template rewrites image parts in place: give it copies
        texts = [proc.apply_chat_template(copy.deepcopy(m), tokenize=False, add_generation_prompt=True) for m in batch]
        images = [img for m in batch for img in message_images(m)]
        proc.tokenizer.padding_side = "left"
        inputs = proc(text=texts, images=images or None, padding=True, return_tensors="pt")
        device = next(self.model.parameters()).device
        inputs = {k: v.to(device) for k, v in inputs.items()}
        kwargs: dict[str, Any] = {"max_new_tokens": sampling.max_tokens, "do_sample": sampling.temperature > 0}
        if sampling.temperature > 0:
            kwargs |= {"temperature": sampling.temperature, "top_p": sampling.top_p or 1.0, "top_k": 0}
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            out = self.model.generate(**inputs, **kwargs)
        new = out[:, inputs["input_ids"].shape[1] :]
        return proc.batch_decode(new, skip_special_tokens=True)


def evaluate_hf(model: Any, processor: Any, seeds: Sequence[int], history: str, max_turns: int = 15,
                env_id: str = "maze_2d/simple", protocol: str = "tuple", label: str = "hf") -> tuple[float, list[EpisodeRecord]]:
    """Greedy solve rate of ``model`` on ``seeds`` through the real runner."""
    was_training = model.training
    model.eval()
    cfg = RunnerConfig(env_id=env_id, max_turns=max_turns, protocol=protocol, history=history,
                       concurrency=max(1, len(seeds)))
    # On CPU, batches of 16 are several times faster per sequence than 64 (padding, attention).
    device = next(model.parameters()).device
    policy = HFPolicy(model, processor, label=label, max_batch=64 if device.type == "cuda" else 16)
    try:
        records = asyncio.run(run_episodes_async(policy, list(seeds), cfg))
    finally:
        model.train(was_training)
    rate = sum(r.success for r in records) / max(1, len(records))
    return rate, records


def load_model(model_dir: str | Path, adapter_dir: str | Path | None = None, device: str = "cpu",
               dtype: torch.dtype = torch.float32):
    """Load a shipped model folder (and optionally a peft adapter on top, not merged)."""
    from transformers import AutoProcessor, Qwen3VLForConditionalGeneration

    processor = AutoProcessor.from_pretrained(model_dir)
    model = Qwen3VLForConditionalGeneration.from_pretrained(model_dir, dtype=dtype).to(device)
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter_dir).to(device)
    model.eval()
    return model, processor
