"""GRPO's advantages and policy loss: group-relative advantages, the loss's items and minibatches,
and PPO's clipped surrogate over the reply tokens (with an optional k3 KL to the base).

A group is ``n`` consecutive episodes of one maze (or of one state, :mod:`training.tiny.data.state_groups`);
each episode's advantage ``(r - mean_group) / (std_group + 1e-6)`` goes to every token of its replies,
weighted per SkyRL's loss reduction (``token_mean``, ``sequence_mean``, ``seq_mean_token_sum_norm``).
"""

from __future__ import annotations

import numpy as np
import torch

from training.tiny.fastpath import Episode, FastQwen3VL, FrameBank, Turn, collate
from training.tiny.trainers.grpo_config import GRPOConfig


def flat_groups(rewards: np.ndarray, n: int) -> int:
    """Groups of ``n`` consecutive episodes with one reward throughout: zero advantage, no signal."""
    return int((rewards.reshape(-1, n).std(1) == 0).sum())


def group_advantages(rewards: np.ndarray, n: int) -> np.ndarray:
    """(r - group mean) / (group std + 1e-6); groups are consecutive runs of ``n`` episodes."""
    g = rewards.reshape(-1, n)
    return ((g - g.mean(1, keepdims=True)) / (g.std(1, keepdims=True) + 1e-6)).reshape(-1)


def loss_items(episodes: list[Episode], advantages: np.ndarray, cfg: GRPOConfig) -> list[tuple[Turn, float, float]]:
    """(turn, advantage, weight per token) for every turn with tokens of the episodes with a
    non-zero advantage; the weights sum to 1 over the tokens in ``token_mean`` and
    ``sequence_mean`` (SkyRL's loss reductions, one episode = one sequence)."""
    sized = ((e, float(a), sum(len(t.tokens) for t in e.turns)) for e, a in zip(episodes, advantages))
    kept = [(e, a, n) for e, a, n in sized if abs(a) > 1e-8 and n]
    if not kept:
        return []
    total = sum(n for _, _, n in kept)
    out = []
    for e, a, n in kept:
        if cfg.loss_reduction == "token_mean":
            w = 1.0 / total
        elif cfg.loss_reduction == "sequence_mean":
            w = 1.0 / (n * len(kept))
        else:  # seq_mean_token_sum_norm: a constant per-token weight
            w = 1.0 / (len(kept) * cfg.max_turns * cfg.max_generate_length)
        out.extend((t, a, w) for t in e.turns if t.tokens)
    return out


def minibatches(n_episodes: int, n_items: int, per_mini: int) -> list[np.ndarray]:
    """Indices of each optimizer step: the episodes in order, ``per_mini`` at a time (a maze's group
    stays together), with the state-group items after them (``n_episodes..n_items-1``) shared out
    evenly, so every update sees both kinds."""
    chunks = [np.arange(i, min(i + per_mini, n_episodes)) for i in range(0, n_episodes, per_mini)]
    extra = np.array_split(np.arange(n_episodes, n_items), len(chunks))
    return [np.concatenate([c, x]) for c, x in zip(chunks, extra, strict=True)]


def _token_logp(logits: torch.Tensor, tgt: torch.Tensor, banned: list[int], temperature: float) -> torch.Tensor:
    logits[:, banned] = float("-inf")  # the sampling distribution excluded them too
    return torch.log_softmax(logits / temperature, -1).gather(1, tgt[:, None]).squeeze(1)


def policy_loss(fast: FastQwen3VL, bank: FrameBank, items: list, cfg: GRPOConfig,
                device: torch.device, pad_id: int, banned: list[int]) -> dict:
    """Backward of the clipped surrogate over ``items`` (turn, advantage, token weight); returns
    stats (token-weighted means)."""
    stats = {"loss": 0.0, "clip_frac": 0.0, "ratio": 0.0, "kl": 0.0}
    wsum = sum(w * len(t.tokens) for t, _, w in items)
    for i in range(0, len(items), cfg.micro_batch_size):
        part = items[i : i + cfg.micro_batch_size]
        b = collate([t.prompt for t, _, _ in part], [t.frames for t, _, _ in part], [t.tokens for t, _, _ in part], pad_id=pad_id)
        b = {k: v.to(device, non_blocking=True) for k, v in b.items()}
        old = torch.as_tensor([lp for t, _, _ in part for lp in t.logprobs], device=device)
        adv = torch.as_tensor([a for t, a, _ in part for _ in t.tokens], device=device, dtype=torch.float32)
        wt = torch.as_tensor([w for t, _, w in part for _ in t.tokens], device=device, dtype=torch.float32)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            vis = fast.vision(b["frames"], bank)  # without lora_vision the tower is shared with the reference
            logits = fast.logits_at(fast.hidden(b["input_ids"], b["pos"], vis), b["tgt_index"])
            if cfg.use_kl_loss:
                with torch.no_grad(), fast.model.disable_adapter():
                    ref_vis = fast.vision(b["frames"], bank) if cfg.lora_vision else vis
                    ref_logits = fast.logits_at(fast.hidden(b["input_ids"], b["pos"], ref_vis), b["tgt_index"])
        logp = _token_logp(logits, b["tgt_ids"], banned, cfg.temperature)
        ratio = torch.exp(logp - old)
        clipped = ratio.clamp(1 - cfg.eps_clip_low, 1 + cfg.eps_clip_high)
        loss = -(torch.minimum(ratio * adv, clipped * adv) * wt).sum()
        if cfg.use_kl_loss:
            log_r = _token_logp(ref_logits, b["tgt_ids"], banned, cfg.temperature) - logp
            kl = torch.exp(log_r) - log_r - 1  # k3: unbiased, always >= 0
            loss = loss + cfg.kl_loss_coef * (kl * wt).sum()
            stats["kl"] += (kl.detach() * wt).sum().item() / wsum
        loss.backward()
        stats["loss"] += loss.item()
        stats["clip_frac"] += (((ratio - clipped).abs() > 1e-6).float() * wt).sum().item() / wsum
        stats["ratio"] += (ratio.detach() * wt).sum().item() / wsum
    return stats
