"""``maze-eval leaderboard``: the latest complete run of each model and maze set, and with
``--curves`` the training curves beside them (each served curve as its own table)."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from agent.cli import json_option
from evaluation.cli.common import open_store, pct, tokens
from evaluation.config import DEFAULT_SEEDS
from evaluation.leaderboard import leaderboard
from serving.adapters import ModelId


@click.command("leaderboard")
@click.option("--env", "env_id", help="only this maze variant")
@click.option("--curves", is_flag=True, help="also show training curves: each run's served curve beside the "
                                             "trainer's pass@1, and other curve points")
@click.option("--wide", is_flag=True, help="every column (path efficiency, invalid actions, tokens and completion "
                                           "tokens per solved episode, date); needs ~190 columns")
@json_option()
@click.pass_obj
def leaderboard_cmd(obj: dict, env_id: str | None, curves: bool, wide: bool, as_json: bool) -> None:
    """One row per (base, adapter, env, protocol, maze set): the latest complete run."""
    from evaluation.served import SERVED_METRIC, TRAINER_METRIC, served_curves

    store = open_store(obj)
    rows = leaderboard(store, env_id)
    points = store.curve() if curves else []
    served = served_curves(store, env_id=env_id) if curves else []
    if as_json:
        data = [{"model": r.model, **r.model_dump(mode="json")} for r in rows]
        out = {"rows": data, "curves": points, "served": [c.model_dump(mode="json") for c in served]}
        click.echo(json.dumps(out if curves else data, indent=2, default=str))
        return
    # Points a served-curve table shows are not repeated as raw rows.
    shown = {c.source for c in served}
    points = [p for p in points if not (p["source"] in shown and p["metric"] in (SERVED_METRIC, TRAINER_METRIC))]
    out = Console()
    out.print(leaderboard_table(rows, points, wide=wide))
    for curve in served:
        out.print(served_table(curve))
        out.print(served_footer(curve), soft_wrap=True)


def leaderboard_table(rows: list, points: list[dict], *, wide: bool = False) -> Table:
    """The leaderboard as a table that fits 80 columns (``wide``: every column): long cells wrap
    onto more lines instead of being cut."""
    table = Table(title="maze-eval leaderboard", pad_edge=False, collapse_padding=True)
    columns = ["model", "env", "protocol", "solve rate", "95% CI", "n", "turns", "run"]
    if wide:
        columns[7:7] = ["path eff.", "invalid", "tokens/solve", "compl./solve"]
        columns.append("date")
    for col in columns:
        table.add_column(col, overflow="fold", no_wrap=col in ("solve rate", "95% CI", "n"))
    for r in rows:
        s = r.summary
        model = str(ModelId.parse(r.model).at(r.adapter_version or None))
        if r.seeds != DEFAULT_SEEDS:
            model += f" (seeds {r.seeds})"
        cells = [model, r.env_id, r.protocol, pct(s.solve_rate), f"{s.ci_low:.1%}-{s.ci_high:.1%}", str(s.n),
                 f"{s.mean_turns_solved:.2f}" if s.mean_turns_solved else "-", r.run_id]
        if wide:
            cells[7:7] = [pct(s.path_efficiency), pct(s.invalid_action_rate), tokens(s.tokens_per_solve),
                          tokens(s.completion_tokens_per_solve)]
            cells.append(r.date)
        table.add_row(*cells)
    for p in points:
        cells = [f"{p['base']} [{p['source']}] step {p['step']}", p["env_id"], "-", f"{p['metric']}={p['value']:.3f}",
                 "", "", "", "training curve"]
        if wide:
            cells[7:7] = ["", "", "", ""]
            cells.append(str(p["recorded_at"])[:16])
        table.add_row(*cells)
    return table


def served_table(curve) -> Table:
    """A served curve (:class:`evaluation.served.ServedCurve`) as a table within 80 columns; the
    best step is starred, and where the watcher gated the steps each one's decision is shown."""
    table = Table(title=f"served curve of {curve.source}: {ModelId(curve.base, curve.adapter)} on {curve.env_id}",
                  pad_edge=False, collapse_padding=True)
    gated = any(p.gate for p in curve.points)  # a watch with --gate: each step's decision beside it
    for col in ("step", "trainer", "served", "95% CI", "gap", "n", "version", *(("gate",) if gated else ())):
        table.add_column(col, overflow="fold", no_wrap=col != "step",
                         justify="right" if col not in ("version", "gate") else "left")
    for p in curve.points:
        star = "*" if p.step == curve.best_step else ""
        gap = "-" if p.gap is None else f"{p.gap * 100:+.1f}"
        gate = (p.gate or "-",) if gated else ()
        table.add_row(f"{star}{p.step}", pct(p.trainer_pass_at_1), pct(p.served), f"{p.ci_low:.0%}-{p.ci_high:.0%}",
                      gap, str(p.n), p.version, *gate, style="bold" if star else None)
    return table


def served_footer(curve) -> str:
    """Which step to pick, and the commands that serve it and show its episodes (one per line, whole,
    so they can be copied)."""
    b = curve.best
    return (f"* best served step {b.step}: {b.served:.1%} of {b.n}; gap: served - trainer, in points\n"
            f"serve it, then see its episodes and the curve as HTML:\n  {curve.promote_command}\n"
            f"  maze-eval report {b.run_id}\n  maze-eval report --curve {curve.source}")


COMMANDS = [leaderboard_cmd]
