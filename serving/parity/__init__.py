"""Served parity: whether the gateway serves an adapter version as it was trained.

:func:`measure` compares the gateway's output for ``base:name@version`` on fixed maze frames
(:func:`parity_frames`) with HF + peft on the version's own files (:mod:`~serving.parity.reference`)
and with the base's served output; :func:`measure_and_record` keeps the result with the version
in the adapter store (:func:`check_served`: the same from a serving config), where ``adapters list/history`` show it and ``promote`` consults it. Used by
``maze-serve adapters verify --parity`` and ``maze-train watch``. Uses the adapters room's face.
"""

from serving.parity.frames import FRAMES_FILE, parity_frames
from serving.parity.measure import (
    SAME_AS_BASE,
    TOLERANCE,
    Gateway,
    ParityError,
    check_served,
    compare,
    difference,
    measure,
    measure_and_record,
    served_top_logprobs,
)
from serving.parity.reference import reference_available, reference_top_logprobs

__all__ = ["FRAMES_FILE", "SAME_AS_BASE", "TOLERANCE", "Gateway", "ParityError", "check_served", "compare", "difference",
           "measure", "measure_and_record", "parity_frames", "reference_available", "reference_top_logprobs",
           "served_top_logprobs"]
