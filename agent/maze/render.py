"""Maze frames: pixel-identical to VisGym's pygame rendering, drawn with numpy only.

VisGym draws with pygame 2.6.1: white floor, grey wall cells, a red goal cell and a blue disc of
radius ``cell/4`` for the agent, rasterised by pygame's integer midpoint circle fill (no
anti-aliasing). :func:`disc_mask` re-implements that fill so no pygame is needed at run time.
"""

from __future__ import annotations

import base64
import io
import struct
import zlib
from functools import lru_cache

import numpy as np
from PIL import Image

CELL_PX = 25
FLOOR_RGB = (255, 255, 255)
WALL_RGB = (169, 169, 169)
GOAL_RGB = (255, 0, 0)
AGENT_RGB = (0, 0, 255)


@lru_cache(maxsize=8)
def disc_mask(radius: int) -> tuple[np.ndarray, int]:
    """Filled-circle mask as pygame's ``draw.circle`` rasterises it.

    Returns ``(mask, offset)``: a square boolean array whose pixel ``[i, j]`` is at
    ``(y0 - offset + i, x0 - offset + j)`` for a circle centred at integer pixel ``(x0, y0)``.
    """
    size = 2 * radius
    mask = np.zeros((size, size), dtype=bool)

    def hline(x_from: int, y: int, x_to: int) -> None:
        mask[y + radius, x_from + radius : x_to + radius + 1] = True

    # Midpoint circle walk; pygame fills horizontal spans from it (src_c/draw.c).
    f, ddf_x, ddf_y, x, y = 1 - radius, 0, -2 * radius, 0, radius
    while x < y:
        if f >= 0:
            y -= 1
            ddf_y += 2
            f += ddf_y
        x += 1
        ddf_x += 2
        f += ddf_x + 1
        if f >= 0:
            hline(-x, y - 1, x - 1)
            hline(-x, -y, x - 1)
        hline(-y, x - 1, y - 1)
        hline(-y, -x, y - 1)
    mask.setflags(write=False)
    return mask, radius


@lru_cache(maxsize=64)
def _background(grid_bytes: bytes, height: int, width: int) -> np.ndarray:
    grid = np.frombuffer(grid_bytes, dtype=np.int8).reshape(height, width)
    cells = np.where(grid[..., None] == 1, np.array(WALL_RGB, np.uint8), np.array(FLOOR_RGB, np.uint8))
    frame = np.repeat(np.repeat(cells.astype(np.uint8), CELL_PX, axis=0), CELL_PX, axis=1)
    frame.setflags(write=False)
    return frame


def _disc(frame: np.ndarray, cell: tuple[int, int], rgb: tuple[int, int, int]) -> None:
    # pygame truncates the float centre and radius to ints before filling.
    mask, off = disc_mask(int(CELL_PX / 4))
    cx, cy = int((cell[1] + 0.5) * CELL_PX), int((cell[0] + 0.5) * CELL_PX)
    frame[cy - off : cy - off + mask.shape[0], cx - off : cx - off + mask.shape[1]][mask] = rgb


def render_frame(
    grid: np.ndarray, agent: tuple[int, int], goal: tuple[int, int], *, goal_left: bool = False
) -> np.ndarray:
    """Draw one frame: ``uint8`` RGB array of shape ``(H*25, W*25, 3)``.

    ``goal_left``: the agent has stepped off the goal cell during the episode. VisGym erases the
    agent's previous disc by painting it white, which on the goal cell leaves a white disc in the
    red square until the agent stands there again; set it to draw that frame.
    """
    grid = np.ascontiguousarray(grid, dtype=np.int8)
    height, width = grid.shape
    frame = _background(grid.tobytes(), height, width).copy()
    gr, gc = goal
    frame[gr * CELL_PX : (gr + 1) * CELL_PX, gc * CELL_PX : (gc + 1) * CELL_PX] = GOAL_RGB
    if goal_left:
        _disc(frame, goal, FLOOR_RGB)
    _disc(frame, agent, AGENT_RGB)
    return frame


def _png_chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


def encode_png(frame: np.ndarray) -> bytes:
    """PNG bytes of an RGB frame: 8-bit truecolour, no filter, zlib level 1.

    Written directly (not through Pillow, whose per-image overhead outweighs the encode itself) since
    the runner encodes one frame per turn; flat colours compress well at the fastest level.
    """
    height, width, _ = frame.shape
    raw = np.zeros((height, width * 3 + 1), dtype=np.uint8)  # column 0: filter type 0 per row
    raw[:, 1:] = frame.reshape(height, -1)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"".join(
        (b"\x89PNG\r\n\x1a\n", _png_chunk(b"IHDR", header), _png_chunk(b"IDAT", zlib.compress(raw.tobytes(), 1)),
         _png_chunk(b"IEND", b""))
    )


def png_data_url(frame: np.ndarray) -> str:
    """``data:image/png;base64,...`` URL of a frame, as the prompt protocol sends images."""
    return "data:image/png;base64," + base64.b64encode(encode_png(frame)).decode("ascii")


def decode_data_url(url: str) -> np.ndarray:
    """Inverse of :func:`png_data_url` (used by scripted servers and tests)."""
    prefix = "data:image/png;base64,"
    if not url.startswith(prefix):
        raise ValueError("expected a data:image/png;base64 URL")
    with Image.open(io.BytesIO(base64.b64decode(url[len(prefix) :]))) as img:
        return np.asarray(img.convert("RGB"))
