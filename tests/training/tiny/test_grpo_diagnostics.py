"""The GRPO diagnostics: detour counting (training.tiny.diagnostics.grpo_signal) and the ablation plot (training.tiny.diagnostics.plots)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.maze import MazeLayout, detour_moves, grid_from_rows
from training.tiny.diagnostics.grpo_signal import measure
from training.tiny.diagnostics.plots import plot_sft_runs, plot_variants

MODELS = Path(__file__).resolve().parents[3] / "models"

# seed 30's maze, a detour task (a policy that heads for the goal runs into the dead end at (1, 3)):
# the way from (1, 1) to (5, 5) climbs back up two rows in the middle
DETOUR = ["#######",
          "#...#.#",
          "#.###.#",
          "#.#...#",
          "#.#.#.#",
          "#...#.#",
          "#######"]
OPEN = ["#######",
        "#.....#",
        "#.....#",
        "#.....#",
        "#.....#",
        "#.....#",
        "#######"]


def test_detour_moves_counts_moves_that_do_not_close_in_on_the_goal():
    assert detour_moves(MazeLayout(grid_from_rows(OPEN), (1, 1), (5, 5))) == 0
    # seed 30: start (1,1), goal (5,5); down to (5,1), right to (5,3), up to (3,3) [2 away], right
    # to (3,5), down to (5,5)
    assert detour_moves(MazeLayout(grid_from_rows(DETOUR), (1, 1), (5, 5))) == 2


def test_plot_variants_draws_every_run_in_the_folder(tmp_path):
    for name, rates in (("a", [0.5, 0.6]), ("b", [0.7, 0.8])):
        rows = [{"global_step": 5 * i, "eval/all/pass_at_1": r} for i, r in enumerate(rates)]
        rows += [{"global_step": i, "reward/mean": 0.5, "reward/greedy_mean": 0.6} for i in range(1, 6)]
        (tmp_path / f"{name}_metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    png = plot_variants(tmp_path)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert _png_width(png) == 1200  # seeds and greedy reward; no all-task panel, as no run logged it

    for name in ("a", "b"):  # runs that logged only the seed eval get only that panel, not empty ones
        rows = [{"global_step": 5 * i, "eval/all/pass_at_1": 0.5} for i in range(3)]
        (tmp_path / f"{name}_metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert _png_width(plot_variants(tmp_path)) == 600


def _png_width(png) -> int:
    return int.from_bytes(png.read_bytes()[16:20], "big")  # the IHDR chunk's width field


def test_plot_sft_runs_reads_eval_and_train_rows(tmp_path):
    rows = [{"kind": "train", "step": s, "samples": 512 * s, "action_acc": 0.5 + s / 100} for s in (1, 20, 40)]
    rows += [{"kind": "eval", "step": s, "samples": 512 * s, "solve_rate_fast": 0.3 + s / 100} for s in (20, 40)]
    (tmp_path / "sft_run.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "x_metrics.jsonl").write_text("not an SFT file, not read\n")
    png = plot_sft_runs(tmp_path)
    assert png.name == "sft_runs.png" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


@pytest.mark.slow
def test_group_signal_measures_the_shipped_pair_on_two_seeds():
    out = measure(str(MODELS / "maze-tiny"), str(MODELS / "maze-grpo"), seeds=2, n=2, temperature=1.0, device="cpu")
    rows = out["mazes"]
    assert [r["seed"] for r in rows] == [0, 1]
    assert all(r["path_len"] >= 8 and 0 <= r["sampled_solved"] <= 2 for r in rows)
    assert out["direct"]["mazes"] + out["detour"]["mazes"] == 2
    # greedy on seeds 0 and 1 is solved by maze-grpo (models/scores_hf.json), and the counts agree
    assert all(r["greedy_solved"] for r in rows) and out["greedy_failed"]["mazes"] == 0


def test_catalog_tasks_are_the_768_layouts_the_seeds_draw_from():
    from agent.maze import generate_from_seed
    from training.tiny.diagnostics.task_sweep import task_key
    from training.tiny.fastpath import FrameCatalog

    tasks = FrameCatalog(7).tasks()
    keys = {task_key(t) for t in tasks}
    assert len(tasks) == len(keys) == 192 * 4
    assert all(task_key(generate_from_seed(7, 7, s)) in keys for s in range(200))
    assert all(tuple(t.start) != tuple(t.goal) for t in tasks)


@pytest.mark.slow
def test_task_sweep_scores_tasks_and_splits_them():
    from agent.maze import generate_from_seed
    from training.tiny.diagnostics import FastPolicy
    from training.tiny.diagnostics.task_sweep import sweep, task_key
    from training.tiny.fastpath import FrameCatalog

    policy = FastPolicy.load(MODELS / "maze-tiny", MODELS / "maze-grpo")
    # seed 0 and 1's tasks (maze-grpo solves both, models/scores_hf.json) and seed 30's detour one
    wanted = {task_key(generate_from_seed(7, 7, s)) for s in (0, 1, 30)}
    tasks = [t for t in FrameCatalog(7).tasks() if task_key(t) in wanted]
    out = sweep(policy, tasks, eval_seeds=2)
    assert out["all"]["tasks"] == 3 and out["direct"]["tasks"] + out["detour"]["tasks"] == 3
    assert out["detour"]["tasks"] >= 1
    assert out["eval_seeds"] == {"tasks": 2, "solved": 2, "rate": 1.0, "seeds": 2, "distinct_tasks": 2}


def test_plot_sweep_draws_the_shipped_sweep(tmp_path):
    from training.tiny.diagnostics.plots import plot_sweep

    results = json.loads((MODELS / "curves" / "task_sweep.json").read_text())
    assert [r["model"] for r in results] == ["maze-tiny", "maze-grpo"]
    for r in results:  # the committed numbers add up
        assert r["all"]["tasks"] == 768 == r["direct"]["tasks"] + r["detour"]["tasks"]
        assert r["all"]["solved"] == sum(row["solved"] for row in r["rows"])
    png = plot_sweep(results, tmp_path / "sweep.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_lineage_joins_continued_runs_at_their_picks(tmp_path):
    from training.tiny.diagnostics.plots import lineage

    def write(name, steps):
        path = tmp_path / name
        path.write_text("".join(json.dumps({"global_step": s, "eval/all/pass_at_1": s / 100}) + "\n" for s in steps))
        return path

    first, second = write("a.jsonl", [0, 5, 10, 15]), write("b.jsonl", [0, 5, 10])
    rows = lineage([(first, 10), (second, 5)])
    # the first run up to its pick, then the continuation shifted by 10 without its step 0 (the same adapter)
    assert [(r["global_step"], r["part"]) for r in rows] == [(0, 0), (5, 0), (10, 0), (15, 1)]
    assert rows[-1]["eval/all/pass_at_1"] == 0.05

    # a run resumed from its step-5 checkpoint logged steps 6-7 twice: the later rows count, once each
    resumed = tmp_path / "r.jsonl"
    resumed.write_text("".join(json.dumps({"global_step": s, "try": t}) + "\n" for s, t in
                               [(5, 0), (6, 0), (7, 0), (6, 1), (7, 1), (8, 1)]))
    rows = lineage([(resumed, 8)])
    assert [(r["global_step"], r["try"]) for r in rows] == [(5, 0), (6, 1), (7, 1), (8, 1)]


def _hf_score(model: str) -> dict:
    """The shipped model's row of models/scores_hf.json (``python -m training.tiny.diagnostics.hf_scores``)."""
    return next(s for s in json.loads((MODELS / "scores_hf.json").read_text()) if s["model"] == model)


def test_training_curve_ends_at_the_shipped_adapters_score():
    top = json.loads((MODELS / "curves" / "training_curves.json").read_text())["grpo"]
    last = top["eval"][-1]
    assert last["global_step"] == top["selected_step"]
    # the trainer's eval of the shipped export and the CPU score of the shipped file agree on the seeds
    assert round(last["pass_at_1"] * 64) == _hf_score("maze-grpo")["solved"]


def test_task_sweep_json_keeps_the_models_not_swept_again(tmp_path):
    from training.tiny.diagnostics.task_sweep import merge_results

    path = tmp_path / "sweep.json"
    assert merge_results(path, [{"model": "maze-grpo", "v": 1}]) == [{"model": "maze-grpo", "v": 1}]
    path.write_text(json.dumps([{"model": "maze-tiny", "v": 0}, {"model": "maze-grpo", "v": 1}]))
    assert merge_results(path, [{"model": "maze-grpo", "v": 2}]) == [{"model": "maze-tiny", "v": 0},
                                                                     {"model": "maze-grpo", "v": 2}]
