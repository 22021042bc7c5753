"""``maze-eval``: score an adapter on the fixed maze set; leaderboard, compare and report.

Exit codes (stable; agent.cli_boundary's table): 0 done, 1 run incomplete (errored episodes
remain; ``--resume`` retries them) or an unexpected error, 2 bad input (options, unknown run,
results database path or URL, no permission), 3 endpoint, model or results database unavailable
(the embedded gateway could not start, e.g. its port is taken), 130 interrupted. Every failure is one line on stderr (with
``--json``: ``{"error", "exit_code"}`` on stdout); ``--verbose`` adds the traceback.
"""

from __future__ import annotations

import json
import logging
import sys

import click
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from agent.cli_boundary import EXIT_INCOMPLETE, EXIT_OK, boundary_group, json_option
from agent.outage import EndpointWaits
from evaluation.config import DEFAULT_SEEDS, EvalConfig
from evaluation.errors import EvalError, UnknownRun, database_failure
from evaluation.evaluate import EvalResult, evaluate
from evaluation.leaderboard import compare, leaderboard
from evaluation.store import Store

console = Console(stderr=True)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _tokens(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


@click.group(cls=boundary_group(database_failure), invoke_without_command=True,
             context_settings={"auto_envvar_prefix": "MAZE", "help_option_names": ["-h", "--help"]})
@click.option("--endpoint", help="OpenAI-compatible base URL (default: the embedded gateway)")
@click.option("--api-key", default="EMPTY", show_default=True, help="bearer token for the endpoint")
@click.option("--base", help="base model id (default: the endpoint's first base model)")
@click.option("--adapter", help="LoRA adapter to score (default: the base alone)")
@click.option("--env", "env_id", default="maze_2d/simple", show_default=True, help="maze variant")
@click.option("--seeds", default="0-63", show_default=True, help="e.g. 0-63 or 1,5,9")
@click.option("--samples", default=1, show_default=True, help="samples per seed (pass@k with k = samples)")
@click.option("--temperature", default=0.0, show_default=True, help="0 is greedy")
@click.option("--max-turns", type=int, help="turn limit (default: the variant's)")
@click.option("--protocol", help="prompt protocol (default: the base model's agent profile)")
@click.option("--history", help="'full' or 'window:K' (default: the base model's agent profile)")
@click.option("--concurrency", default=8, show_default=True, help="episodes at once")
@click.option("--run-name", help="a name for the run")
@click.option("--resume", "resume", metavar="RUN", help="continue run RUN: play only missing or errored episodes")
@click.option("--db", help="results database: SQLAlchemy URL or SQLite path (default: MAZE_DB or ~/.local/share/maze-gateway/results.db)")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON on stdout")
@click.option("-v", "--verbose", is_flag=True, help="show the traceback of a failure")
@click.pass_context
def main(ctx: click.Context, as_json: bool, resume: str | None, verbose: bool, **opts) -> None:
    """Score BASE[:ADAPTER] on the maze set and store the run (no subcommand)."""
    ctx.ensure_object(dict)
    ctx.obj.update(db=opts["db"])
    if ctx.invoked_subcommand is not None:
        return
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING)
    for noisy in ("httpx", "httpx2", "openai"):  # per-request lines would drown the progress bar
        logging.getLogger(noisy).setLevel(logging.WARNING)
    _show_gateway_progress()
    try:
        cfg = EvalConfig(**{k: v for k, v in opts.items() if v is not None})
    except ValidationError as exc:
        raise EvalError("; ".join(e["msg"] for e in exc.errors())) from exc
    result = _run_with_progress(cfg, resume, quiet=as_json)
    if as_json:
        click.echo(result.model_dump_json(indent=2))
    else:
        _print_result(result)
    sys.exit(EXIT_OK if result.status == "complete" else EXIT_INCOMPLETE)


def _show_gateway_progress() -> None:
    """The embedded gateway's start-up steps (a minute or two the first time) as plain "... " lines
    on stderr; its engines' own logs go to files (`maze-serve logs`)."""
    embedded_log = logging.getLogger("serving.embedded")
    if any(getattr(h, "maze_progress", False) for h in embedded_log.handlers):
        return  # once per process, however often main() runs in it
    handler = logging.StreamHandler(sys.stderr)
    handler.maze_progress = True  # type: ignore[attr-defined]
    handler.setFormatter(logging.Formatter("... %(message)s"))
    embedded_log.setLevel(logging.INFO)
    embedded_log.addHandler(handler)
    embedded_log.propagate = False


class WaitColumn(ProgressColumn):
    """'waiting for the endpoint (12s)' while the run's requests wait out an outage; empty otherwise."""

    def __init__(self, waits: EndpointWaits):
        super().__init__()
        self.waits = waits

    def render(self, task) -> Text:
        current = self.waits.current_s()
        return Text("" if current is None else f"waiting for the endpoint ({current:.0f}s)", style="yellow")


def _run_with_progress(cfg: EvalConfig, resume: str | None, quiet: bool) -> EvalResult:
    counts = {"solved": 0, "errors": 0, "done": 0}
    waits = EndpointWaits()
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("solve rate {task.fields[rate]}  errors {task.fields[errors]}"), TimeElapsedColumn(),
               WaitColumn(waits)]
    progress = Progress(*columns, console=console, disable=quiet, transient=False)
    task = progress.add_task("episodes", total=None, rate="-", errors=0)

    def on_episode(rec, done, total) -> None:
        if not progress.live.is_started:  # shown from the first episode: a run that cannot start prints no bar
            progress.start()
        counts["done"] += 1
        counts["solved"] += rec.success
        counts["errors"] += not rec.scored
        scored = counts["done"] - counts["errors"]
        rate = f"{counts['solved'] / scored:.1%}" if scored else "-"
        progress.update(task, completed=done, total=total, rate=rate, errors=counts["errors"])

    try:
        return evaluate(cfg, resume=resume, on_episode=on_episode, waits=waits)
    finally:
        progress.stop()


def _print_result(r: EvalResult) -> None:
    s, m = r.summary, r.manifest
    out = Console()
    out.print(f"run [bold]{r.run_id}[/bold] ({r.status}): {m.served_model} on {m.env_id}, {m.protocol}, history {m.history}")
    out.print(f"solved {s.solved}/{s.n} = {s.solve_rate:.1%} (95% CI {s.ci_low:.1%}-{s.ci_high:.1%}), errors {s.errors}")
    if s.pass_at_k is not None:
        out.print(f"pass@{s.k} = {s.pass_at_k:.1%}")
    out.print(f"mean turns when solved {s.mean_turns_solved or 0:.2f}, path efficiency {_pct(s.path_efficiency)}, "
              f"invalid actions {_pct(s.invalid_action_rate)}")
    out.print(f"tokens per solved episode {_tokens(s.tokens_per_solve)} (completion {_tokens(s.completion_tokens_per_solve)})")
    if r.retries.retries:
        rr = r.retries
        out.print(f"endpoint failures retried: {rr.retries} retries of {rr.retried_requests} requests in {rr.episodes} "
                  f"episodes, longest recovery {rr.recovery_s:.1f}s, {rr.errored} episodes lost")
    if r.retries.outages:
        rr = r.retries
        limited = f", {rr.rate_limited} rate-limited answers" if rr.rate_limited else ""
        out.print(f"waited {rr.waited_s:.1f}s for the endpoint in {rr.outages} outage(s){limited}")
    if r.status != "complete":
        out.print(f"[yellow]{s.errors} episodes errored; continue with: maze-eval --resume {r.run_id}[/yellow]")
    out.print(f"next: maze-eval report {r.run_id}  |  maze-eval leaderboard  |  maze-eval compare {r.run_id} OTHER_RUN",
              soft_wrap=True)


@main.command("leaderboard")
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

    store = Store(obj.get("db"))
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
        model = r.model + (f"@{r.adapter_version}" if r.adapter_version else "")
        if r.seeds != DEFAULT_SEEDS:
            model += f" (seeds {r.seeds})"
        cells = [model, r.env_id, r.protocol, _pct(s.solve_rate), f"{s.ci_low:.1%}-{s.ci_high:.1%}", str(s.n),
                 f"{s.mean_turns_solved:.2f}" if s.mean_turns_solved else "-", r.run_id]
        if wide:
            cells[7:7] = [_pct(s.path_efficiency), _pct(s.invalid_action_rate), _tokens(s.tokens_per_solve),
                          _tokens(s.completion_tokens_per_solve)]
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
    best step is starred."""
    table = Table(title=f"served curve of {curve.source}: {curve.base}:{curve.adapter} on {curve.env_id}",
                  pad_edge=False, collapse_padding=True)
    for col in ("step", "trainer", "served", "95% CI", "gap", "n", "version"):
        table.add_column(col, overflow="fold", no_wrap=col != "step", justify="right" if col != "version" else "left")
    for p in curve.points:
        star = "*" if p.step == curve.best_step else ""
        gap = "-" if p.gap is None else f"{p.gap * 100:+.1f}"
        table.add_row(f"{star}{p.step}", _pct(p.trainer_pass_at_1), _pct(p.served), f"{p.ci_low:.0%}-{p.ci_high:.0%}",
                      gap, str(p.n), p.version, style="bold" if star else None)
    return table


def served_footer(curve) -> str:
    """Which step to pick, and the commands that serve it and show its episodes (one per line, whole,
    so they can be copied)."""
    b = curve.best
    return (f"* best served step {b.step}: {b.served:.1%} of {b.n}; gap: served - trainer, in points\n"
            f"serve it, then see its episodes and the curve as HTML:\n  {curve.promote_command}\n"
            f"  maze-eval report {b.run_id}\n  maze-eval report --curve {curve.source}")


@main.command("compare")
@click.argument("run_a")
@click.argument("run_b")
@json_option()
@click.pass_obj
def compare_cmd(obj: dict, run_a: str, run_b: str, as_json: bool) -> None:
    """Pair RUN_A and RUN_B on seeds: both / only A / only B / neither, exact McNemar p."""
    try:
        c = compare(Store(obj.get("db")), run_a, run_b)
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


@main.command("report")
@click.argument("run_id", required=False)
@click.option("--curve", "source", metavar="SOURCE",
              help="instead of a run: the served curve of training run SOURCE (maze-train watch)")
@click.option("--out", "out_path", help="HTML file to write (default: RUN_ID.html or SOURCE-curve.html)")
@click.pass_obj
def report_cmd(obj: dict, run_id: str | None, source: str | None, out_path: str | None) -> None:
    """Write a self-contained HTML report of RUN_ID (grid, plots, GIF replays), or with --curve the
    served curve of a training run (both curves, the gap, the best step and how to serve it)."""
    if (run_id is None) == (source is None):
        raise EvalError("give a RUN_ID or --curve SOURCE (one of them)")
    if source is not None:
        from evaluation.curve_report import write_curve_report

        try:
            path = write_curve_report(Store(obj.get("db")), source, out_path or f"{source}-curve.html")
        except KeyError as exc:
            raise EvalError(f"no served curve for {source!r} (maze-train watch records one)") from exc
        click.echo(str(path))
        return
    from evaluation.report import write_report

    try:
        path = write_report(Store(obj.get("db")), run_id, out_path or f"{run_id}.html")
    except KeyError as exc:
        raise UnknownRun(run_id) from exc
    click.echo(str(path))


if __name__ == "__main__":
    main()
