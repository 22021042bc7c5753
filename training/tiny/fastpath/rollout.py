"""Batched multi-turn maze episodes on the fast path (GRPO rollouts and quick evaluation).

All episodes advance one turn at a time together: their prompts (the runner's messages under
the history policy, see :mod:`training.tiny.data.demos`) are encoded, the vision tower runs once per turn,
and reply tokens are sampled for the whole batch. Replies are decoded to text, parsed with the
protocol and applied exactly as ``agent.runner`` does (a parse failure costs the turn and sends
the failure text with the current frame; a valid stop ends the episode).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from agent.maze import MOVES, MazeLayout, validate_action
from agent.protocol import HistoryPolicy, Message, assistant_message, get_protocol, user_message
from training.tiny.fastpath.forward import FastQwen3VL, collate
from training.tiny.fastpath.frames import FrameBank, FrameCatalog, frame_rows, frame_url
from training.tiny.fastpath.prompts import EncodedPrompt, PromptCodec


@dataclass
class Turn:
    """One model call: what it saw and which tokens it produced."""

    prompt: EncodedPrompt
    frames: list[int]
    tokens: list[int]
    logprobs: list[float]
    agent: tuple[int, int] | None = None  # where the agent stood when the model saw this prompt


@dataclass
class Episode:
    layout: MazeLayout
    agent: tuple[int, int]
    conversation: list[Message]
    turns: list[Turn] = field(default_factory=list)
    done: bool = False
    success: bool = False
    greedy: bool = False  # decoded greedily inside a sampled batch (a GRPO group's greedy member)
    start_turn: int = 0  # turns already played before this episode object began (a branch from a state)
    branch: bool = False  # first reply sampled, every later one greedy (a state group's member)

    @property
    def reward(self) -> float:
        return 1.0 if self.success else 0.0


@dataclass
class RolloutSettings:
    max_turns: int = 15
    temperature: float = 0.0
    max_new_tokens: int = 12
    history: str = "window:2"
    protocol: str = "tuple"
    kv_cache: bool = True  # off: every reply token re-runs the whole prompt (the old path, for comparison)


@torch.no_grad()
def sample_replies(fast: FastQwen3VL, bank: FrameBank, prompts: list[EncodedPrompt], frames: list[list[int]],
                   eos_id: int, settings: RolloutSettings, generator: torch.Generator | None,
                   device: torch.device, banned: list[int] = (),
                   greedy_rows: list[bool] | None = None) -> tuple[list[list[int]], list[list[float]]]:
    """Sample (or greedily pick) reply tokens for a batch of prompts.

    With ``settings.kv_cache`` the prompts run once and each reply token is one cached decode
    step; a reply is several tokens (``('move', 0)`` and ``<|im_end|>``), so this saves most of the
    turn's compute. ``greedy_rows`` marks rows that take the argmax although the batch samples;
    their log-probs are still those of the sampling distribution (at ``temperature``), which the
    GRPO loss uses.
    """
    B = len(prompts)
    batch = collate(prompts, frames)
    K = settings.max_new_tokens
    lens = torch.as_tensor([len(p.ids) for p in prompts], device=device)
    nxt = torch.as_tensor([p.next_pos for p in prompts], device=device)
    vis = fast.vision(batch["frames"].to(device), bank)
    out_tok = torch.zeros(B, K, dtype=torch.long, device=device)
    out_lp = torch.zeros(B, K, device=device)
    alive = torch.ones(B, dtype=torch.bool, device=device)
    n_gen = torch.zeros(B, dtype=torch.long, device=device)
    argmax_rows = None
    if greedy_rows is not None and any(greedy_rows) and settings.temperature > 0:
        argmax_rows = torch.as_tensor(greedy_rows, dtype=torch.bool, device=device)
    step = (_CachedSteps if settings.kv_cache else _FullSteps)(fast, batch["input_ids"].to(device), batch["pos"].to(device),
                                                               vis, lens, nxt, K)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        logits = step.first()
        for k in range(K):
            if banned:
                logits[:, list(banned)] = float("-inf")
            if settings.temperature > 0:
                logp = torch.log_softmax(logits / settings.temperature, -1)
                tok = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(1)
                if argmax_rows is not None:
                    tok = torch.where(argmax_rows, logits.argmax(-1), tok)
            else:
                logp = torch.log_softmax(logits, -1)
                tok = logits.argmax(-1)
            out_tok[:, k] = tok
            out_lp[:, k] = logp.gather(1, tok[:, None]).squeeze(1)
            n_gen += alive.long()
            alive &= tok != eos_id
            if not bool(alive.any()) or k == K - 1:
                break
            logits = step.next(tok)
    toks, lps = out_tok.tolist(), out_lp.tolist()
    n = n_gen.tolist()
    return [t[: n[b]] for b, t in enumerate(toks)], [lp[: n[b]] for b, lp in enumerate(lps)]


class _CachedSteps:
    """Next-token logits per row: the prompts run once, then one cached decode step per token."""

    def __init__(self, fast: FastQwen3VL, ids, pos, vis, lens, nxt, max_new: int):
        self.fast, self.ids, self.pos, self.vis, self.lens, self.nxt = fast, ids, pos, vis, lens, nxt
        self.cache, self.k = None, 0
        # Right padding leaves pad columns between a short prompt and its reply tokens: masked out.
        self.keep = torch.arange(ids.shape[1], device=ids.device)[None, :] < lens[:, None]

    def first(self) -> torch.Tensor:
        B, L = self.ids.shape
        h, self.cache = self.fast.prefill(self.ids, self.pos, self.vis)
        return self.fast.logits_at(h, torch.arange(B, device=h.device) * L + self.lens - 1)

    def next(self, tok: torch.Tensor) -> torch.Tensor:
        B = tok.shape[0]
        self.keep = torch.cat([self.keep, torch.ones(B, 1, dtype=torch.bool, device=tok.device)], 1)
        h = self.fast.decode(tok, (self.nxt + self.k)[None, :].expand(3, B), self.cache, self.keep)
        self.k += 1
        return self.fast.lm_head(h).float()


class _FullSteps:
    """The uncached path: each new token re-runs the whole prompt and the reply so far."""

    def __init__(self, fast: FastQwen3VL, ids, pos, vis, lens, nxt, max_new: int):
        self.fast, self.vis, self.lens, self.nxt = fast, vis, lens, nxt
        self.ids = torch.nn.functional.pad(ids, (0, max_new))
        self.pos = torch.nn.functional.pad(pos, (0, max_new))
        self.rows = torch.arange(ids.shape[0], device=ids.device)
        self.k = 0

    def first(self) -> torch.Tensor:
        L = self.ids.shape[1]
        return self.fast.logits_at(self.fast.hidden(self.ids, self.pos, self.vis), self.rows * L + self.lens + self.k - 1)

    def next(self, tok: torch.Tensor) -> torch.Tensor:
        self.ids[self.rows, self.lens + self.k] = tok
        self.pos[:, self.rows, self.lens + self.k] = (self.nxt + self.k)[None, :]
        self.k += 1
        return self.first()


def play(fast: FastQwen3VL, bank: FrameBank, codec: PromptCodec, catalog: FrameCatalog, layouts: list[MazeLayout],
         settings: RolloutSettings, generator: torch.Generator | None = None, device: torch.device | str = "cpu",
         max_batch: int = 1024) -> list[Episode]:
    """Play one episode per layout to the end; returns them with every turn's tokens.

    Episodes made by :func:`new_episode` with ``greedy=True`` and played with :func:`play_on`
    decode greedily inside a sampled batch (a GRPO group's greedy member).
    """
    episodes = [new_episode(lay, catalog, settings.protocol) for lay in layouts]
    return play_on(fast, bank, codec, catalog, episodes, settings, generator, device, max_batch)


def new_episode(layout: MazeLayout, catalog: FrameCatalog, protocol: str = "tuple", greedy: bool = False) -> Episode:
    """An episode at the maze's start: the first user message (instructions and frame), no turns yet."""
    proto = get_protocol(protocol)
    first = user_message(proto.initial_text(layout.height, layout.width),
                         image_url=frame_url(catalog.row(layout.grid, layout.start, layout.goal)))
    return Episode(layout=layout, agent=layout.start, conversation=[first], greedy=greedy)


def force_reply(e: Episode, text: str, catalog: FrameCatalog, protocol: str = "tuple") -> None:
    """Step ``e`` with a reply the policy did not choose (it joins the conversation, not the turns)."""
    _apply(e, text, get_protocol(protocol), catalog)
    e.start_turn += 1


def play_on(fast: FastQwen3VL, bank: FrameBank, codec: PromptCodec, catalog: FrameCatalog, episodes: list[Episode],
            settings: RolloutSettings, generator: torch.Generator | None = None, device: torch.device | str = "cpu",
            max_batch: int = 1024) -> list[Episode]:
    """Play started episodes (fresh ones, or branches from a state) until each stops or reaches
    ``settings.max_turns`` counted from the maze's start."""
    device = torch.device(device)
    proto = get_protocol(settings.protocol)
    history = HistoryPolicy.parse(settings.history)
    tok = codec.tokenizer
    for _ in range(settings.max_turns):
        live = [e for e in episodes if not e.done and e.start_turn + len(e.turns) < settings.max_turns]
        if not live:
            break
        for i in range(0, len(live), max_batch):
            part = live[i : i + max_batch]
            sel = [history.select(e.conversation) for e in part]
            prompts = [codec.encode(s) for s in sel]
            frames = [frame_rows(s) for s in sel]
            toks, lps = sample_replies(fast, bank, prompts, frames, codec.eos_id, settings, generator, device,
                                       banned=codec.banned_ids,
                                       greedy_rows=[e.greedy or (e.branch and bool(e.turns)) for e in part])
            texts = tok.batch_decode(toks, skip_special_tokens=True)
            for e, p, f, t, lp, text in zip(part, prompts, frames, toks, lps, texts):
                e.turns.append(Turn(p, f, t, lp, agent=e.agent))
                _apply(e, text, proto, catalog)
    for e in episodes:
        e.done = True
    return episodes


def _apply(e: Episode, text: str, proto, catalog: FrameCatalog) -> None:
    """Step one episode with a reply, as the runner does."""
    e.conversation.append(assistant_message(text))
    grid, goal = e.layout.grid, e.layout.goal
    action = proto.parse(text)
    if action is None:
        e.conversation.append(user_message(proto.parse_failure_text(), image_url=frame_url(catalog.row(grid, e.agent, goal))))
        return
    feedback, name, payload = validate_action(action)
    if name == "stop":
        e.done, e.success = True, e.agent == tuple(goal)
        return
    if name == "move":
        dr, dc = MOVES[int(payload)]
        nxt = (e.agent[0] + dr, e.agent[1] + dc)
        if grid[nxt] == 1:
            from agent.maze import Feedback

            feedback = Feedback.HIT_WALL
        else:
            e.agent = nxt
    e.conversation.append(user_message(feedback.value, image_url=frame_url(catalog.row(grid, e.agent, goal))))


def solve_rate(episodes: list[Episode]) -> float:
    return float(np.mean([e.success for e in episodes])) if episodes else 0.0
