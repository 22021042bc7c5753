"""``maze-eval``: score an adapter on the fixed maze set; leaderboard, compare and report.

Without a subcommand the root command runs an evaluation (:mod:`~evaluation.cli.run`: progress bar,
summary); one module per subcommand: :mod:`~evaluation.cli.leaderboard` (leaderboard and served
curves), :mod:`~evaluation.cli.compare` (two runs paired on seeds), :mod:`~evaluation.cli.report`
(HTML reports) and :mod:`~evaluation.cli.gate` (the offline gate; its exit codes there). Exit codes
(stable; agent.cli.boundary's table): 0 done, 1 run incomplete (errored episodes
remain; ``--resume`` retries them) or an unexpected error, 2 bad input (options, unknown run,
results database path or URL, no permission), 3 endpoint, model or results database unavailable
(the embedded gateway could not start, e.g. its port is taken), 130 interrupted. Every failure is one line on stderr (with
``--json``: ``{"error", "exit_code"}`` on stdout); ``--verbose`` adds the traceback.
"""

from __future__ import annotations

import click

from agent.cli import boundary_group
from evaluation.cli import compare, gate, leaderboard, report, run
from evaluation.errors import database_failure


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
    ctx.obj.update(db=opts["db"])  # the subcommands' results database (common.open_store)
    if ctx.invoked_subcommand is None:
        run.run_evaluation(opts, resume, as_json=as_json, verbose=verbose)


for _group in (leaderboard, compare, report, gate):
    for _command in _group.COMMANDS:
        main.add_command(_command)

__all__ = ["main"]
