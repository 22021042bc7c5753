"""Maze generation and frames against the public VisGym vectors and pygame itself."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

from agent.maze import MOVES, check_size, generate_from_seed, grid_to_rows, render_frame, shortest_path
from agent.maze.render import disc_mask


def sha(frame: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(frame).tobytes()).hexdigest()


def test_public_vectors(vectors):
    assert len(vectors) == 6
    for case in vectors:
        m = generate_from_seed(case["size"], case["size"], case["seed"])
        assert grid_to_rows(m.grid) == case["maze"], case
        assert list(m.start) == case["agent"] and list(m.goal) == case["target"]
        path = shortest_path(m.grid, m.start, m.goal)
        assert len(path) == case["optimal_moves"]
        assert [f"('move', {d})" for d in path[:3]] == case["first_moves"]
        assert sha(render_frame(m.grid, m.start, m.goal)) == case["frame0_sha256"]
        pos = m.start
        for d in path[:3]:
            pos = (pos[0] + MOVES[d][0], pos[1] + MOVES[d][1])
        assert list(pos) == case["agent_after_3"]
        assert sha(render_frame(m.grid, pos, m.goal)) == case["frame_after_3_sha256"]


def test_eval_set_path_lengths():
    """Seeds 0..63 at 7x7: 57 mazes of 8 moves, 6 of 12, 1 of 16 (spec)."""
    lengths = [len(shortest_path(m.grid, m.start, m.goal)) for m in (generate_from_seed(7, 7, s) for s in range(64))]
    assert sorted(set(lengths)) == [8, 12, 16]
    assert (lengths.count(8), lengths.count(12), lengths.count(16)) == (57, 6, 1)


def test_disc_has_104_pixels_in_12x12_box():
    mask, off = disc_mask(6)
    assert mask.sum() == 104 and mask.shape == (12, 12) and off == 6


@pytest.mark.parametrize("size", [7, 9, 11])
def test_frames_match_pygame(size):
    """Every agent position and goal corner renders exactly as pygame 2.6.1 draws it."""
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    pygame = pytest.importorskip("pygame")
    m = generate_from_seed(size, size, 5)
    floors = [tuple(p) for p in np.argwhere(m.grid == 0)]
    for agent in floors:
        surf = pygame.Surface((size * 25, size * 25))
        surf.fill((255, 255, 255))
        for r, c in np.argwhere(m.grid == 1):
            pygame.draw.rect(surf, (169, 169, 169), pygame.Rect(c * 25, r * 25, 25, 25))
        pygame.draw.rect(surf, (255, 0, 0), pygame.Rect(m.goal[1] * 25, m.goal[0] * 25, 25, 25))
        pygame.draw.circle(surf, (0, 0, 255), ((agent[1] + 0.5) * 25, (agent[0] + 0.5) * 25), 25 / 4)
        expected = np.transpose(pygame.surfarray.array3d(surf), (1, 0, 2))
        np.testing.assert_array_equal(render_frame(m.grid, agent, m.goal), expected)


@pytest.mark.parametrize("bad", [0, 1, 2, 8, -7, 7.0, "7"])
def test_sizes_must_be_odd(bad):
    with pytest.raises(ValueError, match="odd integer"):
        check_size(bad, 7)


def test_same_seed_same_maze_different_seeds_differ():
    a, b = generate_from_seed(9, 9, 123), generate_from_seed(9, 9, 123)
    assert np.array_equal(a.grid, b.grid) and a.start == b.start
    grids = {tuple(map(tuple, generate_from_seed(9, 9, s).grid)) for s in range(20)}
    assert len(grids) > 15


def test_mazes_are_perfect_and_connected():
    for seed in range(30):
        m = generate_from_seed(11, 11, seed)
        floors = int((m.grid == 0).sum())
        # A perfect maze on the room lattice is a tree: edges = rooms - 1.
        rooms = 5 * 5
        assert floors == rooms + (rooms - 1)
        assert shortest_path(m.grid, m.start, m.goal) is not None
