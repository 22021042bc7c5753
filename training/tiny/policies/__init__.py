"""The model as ``agent.runner``'s policy: HF transformers' ``generate`` on the PNG frames the runner
sends, batching the turns of concurrent episodes (:mod:`~training.tiny.policies.hf`).

It is the reference the fast path is checked against: the SFT trainer confirms a checkpoint with
it, and the shipped models' scores are measured with it. Names load on first use (the module
pulls in torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from training.tiny import lazy_exports

if TYPE_CHECKING:
    from training.tiny.policies.hf import HFPolicy, evaluate_hf, load_model, message_images

_LAZY = {"training.tiny.policies.hf": ("HFPolicy", "evaluate_hf", "load_model", "message_images")}

__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = ["HFPolicy", "evaluate_hf", "load_model", "message_images"]
