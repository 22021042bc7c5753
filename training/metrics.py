"""Parse training metrics from job logs and dumped eval files into curve points.

SkyRL's console logger (and the local trainer) print ``Step N:`` followed by a dict of metrics,
possibly pretty-printed over several lines. Evals are also dumped as
``{export_path}/dumped_evals/global_step_N_evals/aggregated_results.jsonl``.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

_STEP = re.compile(r"Step (\d+):\s*(.*)$")
_EVAL_DIR = re.compile(r"global_step_(\d+)_evals")


@dataclass(frozen=True)
class StepMetrics:
    """The metrics a run reported at one global step."""

    step: int
    metrics: dict[str, float]


def _numeric(d: dict) -> dict[str, float]:
    return {str(k): float(v) for k, v in d.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _parse_dict(text: str) -> dict | None:
    for loader in (json.loads, ast.literal_eval):
        try:
            value = loader(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(value, dict):
            return value
    return None


def parse_log_lines(lines: Iterable[str]) -> Iterator[StepMetrics]:
    """Yield each ``Step N: {...}`` block of a log, as lines arrive (works on a live tail)."""
    step: int | None = None
    buf: list[str] = []
    depth = 0
    for raw in lines:
        line = raw.rstrip("\n")
        if step is None:
            m = _STEP.search(line)
            if not m:
                continue
            step, rest = int(m.group(1)), m.group(2)
            buf, depth = [], 0
            line = rest
            if "{" not in line:
                if not line.strip():
                    continue  # the dict starts on the next line
                step = None
                continue
        if not buf and "{" in line:
            line = line[line.index("{"):]
        buf.append(line)
        depth += line.count("{") - line.count("}")
        if depth <= 0 and buf:
            parsed = _parse_dict("\n".join(buf))
            if parsed is not None:
                yield StepMetrics(step, _numeric(_flatten(parsed)))
            step, buf = None, []


def _flatten(d: dict, prefix: str = "") -> dict:
    out: dict = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "/"))
        else:
            out[key] = v
    return out


def parse_eval_dump(path_name: str, text: str) -> StepMetrics | None:
    """Metrics of one ``aggregated_results.jsonl`` (its folder name carries the step)."""
    m = _EVAL_DIR.search(path_name)
    if not m:
        return None
    metrics: dict[str, float] = {}
    for line in text.splitlines():
        parsed = _parse_dict(line) if line.strip() else None
        if parsed:
            metrics.update(_numeric(_flatten(parsed)))
    return StepMetrics(int(m.group(1)), metrics) if metrics else None
