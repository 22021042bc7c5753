"""``maze-eval gate NAME@VERSION``: the offline gate (:mod:`evaluation.gate`) from the command line.

Plays with the root command's endpoint, key, base, env and sampling options; the seeds, looks and
alpha are the name's gate policy, which the gateway hands out (``adapters.gate`` in its serving
config). Exit codes: 0 the candidate was promoted; 1 it was not (found worse, or undecided), or a
look's episodes errored; 4 it was found better but not promoted (the name moved meanwhile, or its
parity no longer passes), or the gate refused it before playing (no passed parity record: exit 4, as
a refused promote); 2 bad input; 3 endpoint, store or database unavailable.
"""

from __future__ import annotations

import sys

import click
from click.core import ParameterSource
from rich.console import Console

from agent.cli import EXIT_CONFLICT, EXIT_FAILED, EXIT_OK, json_option
from evaluation.config import EvalConfig
from evaluation.errors import EvalError
from serving.adapters import ModelId

# The root command's options the gate plays with; the others (seeds, samples, adapter, run name,
# resume) are the gate's own to set.
PLAY_OPTIONS = ("endpoint", "api_key", "base", "env_id", "temperature", "max_turns", "protocol", "history",
                "concurrency", "db")
NOT_FOR_GATE = ("adapter", "seeds", "samples", "run_name", "resume")


def _play_config(ctx: click.Context) -> EvalConfig:
    root = ctx.find_root()
    given = [name for name in NOT_FOR_GATE if root.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)]
    if given:
        raise EvalError(f"maze-eval gate sets {', '.join('--' + n.replace('_', '-') for n in given)} itself: the "
                        "seeds and looks are the name's gate policy (adapters.gate in the gateway's config)")
    opts = {k: root.params[k] for k in PLAY_OPTIONS if root.params.get(k) is not None}
    try:
        return EvalConfig(**opts)
    except ValueError as exc:
        raise EvalError(str(exc)) from exc


@click.command("gate")
@click.argument("target", metavar="NAME@VERSION")
@json_option()
@click.pass_context
def gate_cmd(ctx: click.Context, target: str, as_json: bool) -> None:
    """Promote NAME@VERSION only if it plays better than the version NAME serves.

    Both versions play the same mazes through the gateway, each pinned by version, looked at after
    the policy's seed counts (16/32/48/64 by default); an exact one-sided test on the seeds only one
    of them solved promotes with a false-promotion rate of at most the policy's alpha. The decision
    and its evidence go into NAME's history (`maze-serve adapters history NAME`) and the results
    database (`maze-eval compare` of the two runs). A version without a passed parity record is
    refused before anything is played. The key (--api-key) must be one that may promote NAME."""
    from evaluation.gate import gate

    out = Console(stderr=True, highlight=False)

    def on_look(look) -> None:
        if not as_json:
            needed = "-" if look.wins_needed is None else look.wins_needed
            out.print(f"look at {look.seeds} seeds: {look.wins} wins, {look.losses} losses (a promotion needs "
                      f"{needed} wins): {look.verdict}")

    result = gate(_play_config(ctx), target, on_look=on_look)
    if as_json:
        click.echo(result.model_dump_json(indent=2))
    else:
        _print(result)
    sys.exit(EXIT_OK if result.promoted else EXIT_CONFLICT if result.verdict == "better" else EXIT_FAILED)


def _print(r) -> None:
    out = Console(highlight=False)
    out.print(f"gate {ModelId(None, r.name, r.version)} against {r.against} on {r.base}: {r.verdict} after {r.seeds} seeds, "
              f"{r.wins} wins and {r.losses} losses (one-sided p {r.p_value:.3g}; alpha {r.alpha:g} over the looks)")
    if r.promoted:
        out.print(f"promoted: {r.name} -> {r.version}")
    else:
        out.print(f"{r.name} left on {r.against}" + (f": {r.reason}" if r.reason else ""))
    out.print(f"test: {r.test}", soft_wrap=True)
    out.print(f"next: maze-serve adapters history {r.name}  |  maze-eval compare {r.run_against} {r.run}", soft_wrap=True)


COMMANDS = [gate_cmd]
