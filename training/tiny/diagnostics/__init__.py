"""The shipped pair measured and drawn: scores, generalisation, GRPO's signal, training curves.

:mod:`~training.tiny.diagnostics.hf_scores` plays the 64 eval seeds through the real runner with HF
(``models/scores_hf.json``); :mod:`~training.tiny.diagnostics.task_sweep` plays all 768 tasks on
the fast path, split into direct and detour mazes; :mod:`~training.tiny.diagnostics.grpo_signal`
shows how much GRPO signal each eval maze gives a policy; :mod:`~training.tiny.diagnostics.plots`
draws training curves and sweeps. :class:`FastPolicy` (:mod:`~training.tiny.diagnostics.fast_policy`)
is the set-up they share: a model and adapter on the fast path, loaded as GRPO trains it, ready to
play. Each module runs with ``python -m``; names load on first use (the modules pull in torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from training.tiny import lazy_exports

if TYPE_CHECKING:
    from training.tiny.diagnostics.fast_policy import FastPolicy

_LAZY = {"training.tiny.diagnostics.fast_policy": ("FastPolicy",)}

__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = ["FastPolicy"]
