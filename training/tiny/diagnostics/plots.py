"""Training curves of the shipped models: JSON (the numbers) and one PNG (matplotlib).

Usage: ``python -m training.tiny.diagnostics.plots --sft runs/sft/metrics.jsonl --grpo
runs/grpo/export/metrics.jsonl --out models/curves``; ``python -m training.tiny.diagnostics.plots
variants DIR`` draws ``DIR/variants.png`` from the ``*_metrics.jsonl`` of several GRPO runs (an
ablation) in DIR; ``python -m training.tiny.diagnostics.plots sweep FILE.json`` draws ``FILE.png``
from :mod:`~training.tiny.diagnostics.task_sweep` results; ``python -m
training.tiny.diagnostics.plots lineage OUT.jsonl METRICS:STEP...`` joins continued runs into one
curve (see :func:`lineage`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from training.tiny.trainers import SEEDS_METRIC, TASKS_METRIC


def _pyplot():
    """matplotlib.pyplot on the file-only Agg backend (no display on training or CI machines)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _evals(rows: list[dict], metric: str = SEEDS_METRIC) -> list[dict]:
    """``(global_step, pass_at_1)`` of the rows that logged ``metric`` (seeds 0..63, or ``TASKS_METRIC``)."""
    return [{"global_step": r["global_step"], "pass_at_1": r[metric]} for r in rows if metric in r]


def curves(sft_metrics: Path, grpo_metrics: Path, selected_step: int | None = None, grpo_step: int | None = None,
           grpo_extra: dict[str, Path] | None = None) -> dict:
    """The numbers behind the plot; ``grpo_extra`` adds the greedy evals of other GRPO runs (variants)."""
    sft = _rows(sft_metrics)
    grpo = _rows(grpo_metrics)
    return {
        "sft": {
            "selected_step": selected_step,
            "train": [{k: r[k] for k in ("step", "samples", "elapsed_s", "loss", "token_acc", "action_acc")}
                      for r in sft if r.get("kind") == "train"],
            "eval": [{k: r.get(k) for k in ("step", "samples", "elapsed_s", "solve_rate_fast", "solve_rate_runner")}
                     for r in sft if r.get("kind") == "eval"],
        },
        "grpo": {
            "selected_step": grpo_step,
            "train": [{"global_step": r["global_step"], "reward_mean": r.get("reward/mean"),
                       "avg_turns": r.get("episode/avg_turns"), "step_s": r.get("timing/step_s")}
                      for r in grpo if "reward/mean" in r],
            "eval": _evals(grpo),
            "eval_all_tasks": _evals(grpo, TASKS_METRIC),
            "variants": {name: _evals(_rows(path)) for name, path in (grpo_extra or {}).items()},
        },
    }


def lineage(parts: list[tuple[Path, int]]) -> list[dict]:
    """One metrics curve for an adapter made by a chain of runs, each continuing the previous
    run's picked export (``--init-adapter``): every ``(metrics, picked step)`` part up to its pick,
    its steps shifted to follow the previous part. A continuation's step 0 evaluates the adapter
    the previous part ended on, so that row is dropped. A run resumed from a checkpoint logs the
    steps after it again; the later row of a step is the one that led to the adapter, so it wins."""
    out: list[dict] = []
    offset = 0
    for i, (path, upto) in enumerate(parts):
        latest = {r["global_step"]: r for r in _rows(path)}
        for step, r in sorted(latest.items()):
            if step > upto or (i and step == 0):
                continue
            out.append({**r, "global_step": step + offset, "part": i})
        offset += upto
    return out


def _star(ax, rows: list[dict], step_key: str, step: int | None, x: str, y: str, label: str) -> None:
    """Mark the shipped checkpoint (the eval row at ``step``) on a curve, if it was evaluated."""
    sel = [r for r in rows if step is not None and r[step_key] == step]
    if sel:
        ax.plot([sel[0][x]], [sel[0][y]], "r*", ms=14, label=label)


def plot(data: dict, png: Path) -> None:
    plt = _pyplot()

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    tr, ev = data["sft"]["train"], data["sft"]["eval"]
    ax = axes[0]
    ax.plot([r["samples"] for r in tr], [r["loss"] for r in tr], label="loss")
    ax.set_yscale("log")
    ax.set_xlabel("SFT samples")
    ax.set_title("SFT loss")
    ax = axes[1]
    ax.plot([r["samples"] for r in tr], [r["action_acc"] for r in tr], label="reply accuracy (train batch)")
    ax.plot([r["samples"] for r in ev], [r["solve_rate_fast"] for r in ev], "o-", label="solve rate, seeds 0..63")
    _star(ax, ev, "step", data["sft"]["selected_step"], "samples", "solve_rate_fast", "maze-tiny")
    ax.axhspan(0.35, 0.55, color="g", alpha=0.1, label="target band")
    ax.set_xlabel("SFT samples")
    ax.set_ylim(0, 1)
    ax.set_title("SFT accuracy and closed-loop solve rate")
    ax.legend(fontsize=8)
    ax = axes[2]
    gt, ge = data["grpo"]["train"], data["grpo"]["eval"]
    ax.plot([r["global_step"] for r in gt], [r["reward_mean"] for r in gt], label="train reward (sampled episodes)")
    ax.plot([r["global_step"] for r in ge], [r["pass_at_1"] for r in ge], "o-", label="greedy pass@1, seeds 0..63")
    if data["grpo"].get("eval_all_tasks"):
        at = data["grpo"]["eval_all_tasks"]
        ax.plot([r["global_step"] for r in at], [r["pass_at_1"] for r in at], "s-", ms=4, label="greedy pass@1, all 768 tasks")
    for name, rows in data["grpo"].get("variants", {}).items():
        ax.plot([r["global_step"] for r in rows], [r["pass_at_1"] for r in rows], ".--", lw=1, label=f"pass@1, {name}")
    _star(ax, ge, "global_step", data["grpo"]["selected_step"], "global_step", "pass_at_1", "maze-grpo")
    ax.axhline(0.95, color="g", ls="--", lw=1, label="95% goal")
    ax.axhline(0.90, color="g", ls=":", lw=1, label="90% minimum")
    ax.set_xlabel("GRPO step")
    ax.set_ylim(0, 1)
    ax.set_title("GRPO (LoRA) on maze-tiny")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def _rolling(values: list[float], k: int = 10) -> list[float]:
    return [sum(values[max(0, i - k + 1) : i + 1]) / len(values[max(0, i - k + 1) : i + 1]) for i in range(len(values))]


def plot_variants(folder: Path) -> Path:
    """One panel per metric the runs logged, for every ``NAME_metrics.jsonl`` in ``folder``: greedy
    pass@1 on seeds 0..63; greedy reward on each step's fresh random mazes (a 10-step rolling mean,
    runs with ``greedy_samples_per_prompt``); greedy pass@1 on all 768 tasks (``eval_all_tasks``)."""
    plt = _pyplot()

    runs = {p.name.removesuffix("_metrics.jsonl"): _rows(p) for p in sorted(folder.glob("*_metrics.jsonl"))}
    series = {  # panel title -> run name -> (steps, values)
        "greedy pass@1, seeds 0..63": {n: _xy(_evals(rows)) for n, rows in runs.items()},
        "greedy reward, fresh random mazes (10-step mean)": {n: _greedy_reward(rows) for n, rows in runs.items()},
        "greedy pass@1, all 768 tasks": {n: _xy(_evals(rows, TASKS_METRIC)) for n, rows in runs.items()},
    }
    panels = {title: by_run for title, by_run in series.items() if any(xs for xs, _ in by_run.values())}
    panels = panels or dict(list(series.items())[:1])
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    colors = {name: f"C{i % 10}" for i, name in enumerate(runs)}
    for ax, (title, by_run) in zip(axes[0], panels.items(), strict=True):
        for name, (xs, ys) in by_run.items():
            if xs:
                ax.plot(xs, ys, "o-" if "pass@1" in title else "-", ms=3, color=colors[name], label=name)
        ax.axhline(0.9, color="g", ls="--", lw=1, label="90%")
        ax.set_xlabel("GRPO step of the run")
        ax.set_ylim(0.4, 1)
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.tight_layout()
    png = folder / "variants.png"
    fig.savefig(png, dpi=100)
    return png


def _xy(evals: list[dict]) -> tuple[list[int], list[float]]:
    return [r["global_step"] for r in evals], [r["pass_at_1"] for r in evals]


def _greedy_reward(rows: list[dict]) -> tuple[list[int], list[float]]:
    logged = [r for r in rows if r.get("reward/greedy_mean") is not None]
    return [r["global_step"] for r in logged], _rolling([r["reward/greedy_mean"] for r in logged])


def plot_sft_runs(folder: Path) -> Path:
    """Every ``sft_NAME.jsonl`` (training.tiny.trainers.sft metrics) in ``folder``: the greedy solve rate on seeds
    0..63 and the reply-action accuracy on the training batches, both against samples seen."""
    plt = _pyplot()

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4))
    for path in sorted(folder.glob("sft_*.jsonl")):
        rows, name = _rows(path), path.stem.removeprefix("sft_")
        ev = [r for r in rows if r.get("kind") == "eval"]
        tr = [r for r in rows if r.get("kind") == "train" and r["step"] > 1]
        (line,) = a1.plot([r["samples"] / 1e3 for r in ev], [r["solve_rate_fast"] for r in ev], "o-", ms=3, label=name)
        a2.plot([r["samples"] / 1e3 for r in tr], [r["action_acc"] for r in tr], color=line.get_color(), label=name)
    a1.axhspan(0.35, 0.55, color="0.9", label="base band")
    a1.axhline(0.9, color="g", ls="--", lw=1, label="90%")
    a1.set_title("greedy solve rate, seeds 0..63")
    a2.set_title("reply action accuracy, training batches")
    for ax in (a1, a2):
        ax.set_xlabel("samples (thousands) of the run")
        ax.legend(fontsize=8)
    fig.tight_layout()
    png = folder / "sft_runs.png"
    fig.savefig(png, dpi=100)
    return png


def plot_sweep(results: list[dict], png: Path) -> Path:
    """Grouped bars of :mod:`training.tiny.diagnostics.task_sweep` results: each model's greedy solve rate on the
    eval seeds, on all tasks, and on the direct and detour tasks."""
    plt = _pyplot()

    parts = (("eval_seeds", "eval seeds 0..63"), ("all", "all tasks"), ("direct", "direct tasks"), ("detour", "detour tasks"))
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / max(1, len(results))
    for i, res in enumerate(results):
        xs = [j + i * width for j in range(len(parts))]
        rates = [res[k]["rate"] or 0.0 for k, _ in parts]
        bars = ax.bar(xs, rates, width, label=res["model"])
        for bar, (k, _) in zip(bars, parts, strict=True):
            ax.annotate(f"{res[k]['solved']}/{res[k]['tasks']}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=7)
    ax.set_xticks([j + width * (len(results) - 1) / 2 for j in range(len(parts))], [label for _, label in parts])
    ax.axhline(0.9, color="g", ls="--", lw=1, label="90%")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("greedy solve rate")
    ax.set_title("maze_2d/simple: 768 tasks (192 mazes x 4 corners), 15 turns")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    return png


def main(argv: list[str] | None = None) -> None:
    argv = list(argv) if argv is not None else sys.argv[1:]
    if argv[:1] == ["variants"]:
        plot_variants(Path(argv[1]))
        return
    if argv[:1] == ["sft-runs"]:
        plot_sft_runs(Path(argv[1]))
        return
    if argv[:1] == ["lineage"]:
        parts = [(Path(path), int(step)) for path, step in (a.rsplit(":", 1) for a in argv[2:])]
        Path(argv[1]).write_text("".join(json.dumps(r) + "\n" for r in lineage(parts)))
        return
    if argv[:1] == ["sweep"]:
        plot_sweep(json.loads(Path(argv[1]).read_text()), Path(argv[1]).with_suffix(".png"))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sft", type=Path, required=True)
    parser.add_argument("--grpo", type=Path, required=True)
    parser.add_argument("--sft-step", type=int)
    parser.add_argument("--grpo-step", type=int)
    parser.add_argument("--grpo-extra", action="append", default=[], metavar="NAME=METRICS",
                        help="another GRPO run's metrics.jsonl to overlay (repeatable)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    extra = dict(item.split("=", 1) for item in args.grpo_extra)
    data = curves(args.sft, args.grpo, args.sft_step, args.grpo_step, {k: Path(v) for k, v in extra.items()})
    (args.out / "training_curves.json").write_text(json.dumps(data, indent=1) + "\n")
    plot(data, args.out / "training_curves.png")


if __name__ == "__main__":
    main()
