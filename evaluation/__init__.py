"""maze-gateway evaluation: score adapters on the fixed maze set, keep a leaderboard, write reports."""

from evaluation.config import EvalConfig, parse_seeds
from evaluation.errors import EndpointUnavailable, EvalError, UnknownRun
from evaluation.evaluate import EvalResult, evaluate, evaluate_async
from evaluation.leaderboard import Comparison, LeaderboardRow, compare, leaderboard
from evaluation.manifest import RunManifest
from evaluation.served import ServedCurve, ServedPoint, record_served_step, served_curves, served_run_name
from evaluation.stats import mcnemar_exact, pass_at_k, wilson_interval
from evaluation.store import Store
from evaluation.summary import RetryReport, RunSummary, summarize

__all__ = [
    "Comparison", "EndpointUnavailable", "EvalConfig", "EvalError", "EvalResult", "LeaderboardRow", "RetryReport",
    "RunManifest", "RunSummary", "ServedCurve", "ServedPoint", "Store", "UnknownRun", "compare", "evaluate",
    "evaluate_async", "leaderboard", "mcnemar_exact", "parse_seeds", "pass_at_k", "record_served_step", "served_curves",
    "served_run_name", "summarize", "wilson_interval",
]
