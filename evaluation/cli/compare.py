"""``maze-eval compare``: two runs paired on their seeds, with an exact McNemar test."""

from __future__ import annotations

import json

import click
from rich.console import Console

from agent.cli import json_option
from evaluation.cli.common import open_store
from evaluation.errors import UnknownRun
from evaluation.leaderboard import compare
from serving.adapters import ModelId


@click.command("compare")
@click.argument("run_a")
@click.argument("run_b")
@json_option()
@click.pass_obj
def compare_cmd(obj: dict, run_a: str, run_b: str, as_json: bool) -> None:
    """Pair RUN_A and RUN_B on seeds: both / only A / only B / neither, exact McNemar p; and, when the
    two are an offline gate's runs (`maze-eval gate`), the gate's decision and its evidence."""
    try:
        c = compare(open_store(obj), run_a, run_b)
    except KeyError as exc:
        raise UnknownRun(exc.args[0]) from exc
    if as_json:
        click.echo(json.dumps({**c.model_dump(), "verdict": c.verdict}, indent=2))
        return
    out = Console()
    out.print(f"A {c.model_a} ({c.run_a})", highlight=False)
    out.print(f"B {c.model_b} ({c.run_b})", highlight=False)
    out.print(f"{c.paired} paired seeds: both {c.both}, only A {c.only_a}, only B {c.only_b}, neither {c.neither}")
    out.print(f"A {c.solve_rate_a:.1%} vs B {c.solve_rate_b:.1%}; exact McNemar p = {c.p_value:.3g}")
    better = {"a_better": f"A ({c.model_a}) is better", "b_better": f"B ({c.model_b}) is better"}
    out.print(f"verdict: {better.get(c.verdict, 'no significant difference')} at p < {c.alpha:g}", highlight=False)
    for g in c.gates:  # the offline gate's own test, where these two runs were a gate's
        done = "promoted" if g["promoted"] else f"left {g['name']} on {g['against']}" + (
            f" ({g['reason']})" if g.get("reason") else "")
        out.print(f"gate {ModelId(None, g['name'], g['version'])} vs {g['against']}: {g['verdict']} with {g['wins']} wins, "
                  f"{g['losses']} losses on {g['seeds']} seeds (one-sided p {g['p_value']:.3g}, alpha {g['alpha']:g} "
                  f"over the looks); {done}", highlight=False)


COMMANDS = [compare_cmd]
