"""What every ``maze-eval`` command shares: the results database the root's ``--db`` names, and
how a rate or a token count reads in a table ("-" where there is none)."""

from __future__ import annotations

from evaluation.store import Store


def pct(x: float | None) -> str:
    """``x`` as a percentage with one decimal, or "-" when the metric has no value."""
    return "-" if x is None else f"{x:.1%}"


def tokens(x: float | None) -> str:
    """A token count without decimals, or "-" when the metric has no value."""
    return "-" if x is None else f"{x:.0f}"


def open_store(obj: dict) -> Store:
    """The results database of the root command's ``--db`` (None: MAZE_DB or the default file),
    which the root puts in the context object for its subcommands."""
    return Store(obj.get("db"))
