"""Learning-rate schedules shared by SFT and GRPO: a factor of the peak lr per optimizer step."""

from __future__ import annotations

import math
from typing import Literal

Schedule = Literal["constant", "cosine"]


def lr_factor(step: int, schedule: Schedule, warmup: int, total: int) -> float:
    """Linear warm-up over ``warmup`` steps, then 1 (constant) or a cosine down to 0 at ``total``.

    ``step`` counts from 0 (the first update). A constant lr keeps a small model's greedy solve
    rate swinging by tens of points between evaluations; the cosine lets the last checkpoints settle.
    """
    if step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    span = max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - warmup) / span)))
