"""The root ``maze-eval`` command's work: score a model on the maze set with a live progress bar on
stderr (with the endpoint's and the results database's outages while the run waits them out), then
print the run's summary (or its JSON) and exit 0 when complete, 1 when episodes errored."""

from __future__ import annotations

import logging
import sys

import click
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from agent.cli import EXIT_INCOMPLETE, EXIT_OK
from agent.runner import EndpointWaits
from evaluation.cli.common import pct, tokens
from evaluation.config import EvalConfig
from evaluation.errors import EvalError
from evaluation.evaluate import EvalResult, evaluate

console = Console(stderr=True)


def run_evaluation(opts: dict, resume: str | None, *, as_json: bool, verbose: bool) -> None:
    """Run (or with ``resume``, continue) the evaluation the root command's options describe, print
    its result and exit with its status; options the user left out take :class:`EvalConfig`'s defaults."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING)
    for noisy in ("httpx", "httpx2", "openai"):  # per-request lines would drown the progress bar
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if not opts.get("endpoint"):  # the embedded gateway is used, and started if it is not up
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
    from serving.local import ensure_embedded_gateway  # only without an endpoint: serving is there

    embedded_log = logging.getLogger(ensure_embedded_gateway.__module__)
    if any(getattr(h, "maze_progress", False) for h in embedded_log.handlers):
        return  # once per process, however often main() runs in it
    handler = logging.StreamHandler(sys.stderr)
    handler.maze_progress = True  # type: ignore[attr-defined]
    handler.setFormatter(logging.Formatter("... %(message)s"))
    embedded_log.setLevel(logging.INFO)
    embedded_log.addHandler(handler)
    embedded_log.propagate = False


class WaitColumn(ProgressColumn):
    """'waiting for the endpoint (12s)' while the run's requests wait out an outage (``what``: the
    results database, while its writes do); empty otherwise."""

    def __init__(self, waits: EndpointWaits, what: str = "the endpoint"):
        super().__init__()
        self.waits, self.what = waits, what

    def render(self, task) -> Text:
        current = self.waits.current_s()
        return Text("" if current is None else f"waiting for {self.what} ({current:.0f}s)", style="yellow")


def _run_with_progress(cfg: EvalConfig, resume: str | None, quiet: bool) -> EvalResult:
    """Evaluate ``cfg`` with a progress bar (episodes, solve rate, errors, endpoint waits) on stderr;
    ``quiet`` (JSON output) hides the bar."""
    counts = {"solved": 0, "errors": 0, "done": 0}
    waits, db_waits = EndpointWaits(), EndpointWaits()
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("solve rate {task.fields[rate]}  errors {task.fields[errors]}"), TimeElapsedColumn(),
               WaitColumn(waits), WaitColumn(db_waits, "the results database")]
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
        return evaluate(cfg, resume=resume, on_episode=on_episode, waits=waits, db_waits=db_waits)
    finally:
        progress.stop()


def _print_result(r: EvalResult) -> None:
    """The run's summary on stdout: solve rate with its CI, efficiency, tokens, endpoint retries and
    outages, and the commands to resume it or look at it next."""
    s, m = r.summary, r.manifest
    out = Console()
    out.print(f"run [bold]{r.run_id}[/bold] ({r.status}): {m.served_model} on {m.env_id}, {m.protocol}, history {m.history}")
    out.print(f"solved {s.solved}/{s.n} = {s.solve_rate:.1%} (95% CI {s.ci_low:.1%}-{s.ci_high:.1%}), errors {s.errors}")
    if s.pass_at_k is not None:
        out.print(f"pass@{s.k} = {s.pass_at_k:.1%}")
    out.print(f"mean turns when solved {s.mean_turns_solved or 0:.2f}, path efficiency {pct(s.path_efficiency)}, "
              f"invalid actions {pct(s.invalid_action_rate)}")
    out.print(f"tokens per solved episode {tokens(s.tokens_per_solve)} (completion {tokens(s.completion_tokens_per_solve)})")
    if r.retries.retries:
        rr = r.retries
        out.print(f"endpoint failures retried: {rr.retries} retries of {rr.retried_requests} requests in {rr.episodes} "
                  f"episodes, longest recovery {rr.recovery_s:.1f}s, {rr.errored} episodes lost")
    if r.retries.outages:
        rr = r.retries
        limited = f", {rr.rate_limited} rate-limited answers" if rr.rate_limited else ""
        out.print(f"waited {rr.waited_s:.1f}s for the endpoint in {rr.outages} outage(s){limited}")
    if r.db_outages:
        out.print(f"waited {r.db_waited_s:.1f}s for the results database in {r.db_outages} outage(s); no episode lost")
    if r.status != "complete":
        out.print(f"[yellow]{s.errors} episodes errored; continue with: maze-eval --resume {r.run_id}[/yellow]")
    out.print(f"next: maze-eval report {r.run_id}  |  maze-eval leaderboard  |  maze-eval compare {r.run_id} OTHER_RUN",
              soft_wrap=True)
