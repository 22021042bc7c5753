"""Maze frames as integer ids, and their pixel values as the model's own image processor makes them.

Every maze image of a variant has the same size, so the fast path numbers them: a frame is an id
into :class:`FrameCatalog` (every 7x7 maze x goal corner x agent cell: 13,056 frames), prompts
carry it as a ``frame:<id>`` image URL, and its pixel values come from the model's own HF image
processor once (:class:`FrameBank`), so training sees exactly the tensors inference sees.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

from agent.maze import MazeLayout, corners, generate_from_seed, png_data_url, render_frame
from agent.protocol import Message

log = logging.getLogger(__name__)

FRAME_URL_PREFIX = "frame:"


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
    cell edges (measured by ``training.tiny.gpu.check``).

    Frames are processed on first use, in batches, and stored in a growing table, so a CPU test
    touches only the few it needs; :meth:`fill` with no rows processes the whole catalog.

    A frame is 196 patches x 1536 values: 1.2 MB in float32, 15.7 GB for the whole catalog. So on
    CPU the table holds at most ``max_frames`` (default 2048, 2.4 GB): when a request would pass
    that, the table is emptied and refilled with what is asked (processing a frame costs far less
    than the model's step on it). A whole-catalog :meth:`fill` is never capped.
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
