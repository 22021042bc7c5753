"""Served parity: whether the gateway serves an adapter version as it was trained.

:func:`check_served` measures ``base:name@version`` through a :class:`Gateway` on fixed maze frames
(:mod:`~serving.parity.frames`) against HF + peft on the version's own files
(:mod:`~serving.parity.reference`) and against the base's served output
(:mod:`~serving.parity.measure`), and keeps the result with the version in the adapter store, where
``adapters list/history`` show it and ``promote`` consults it; :class:`ParityError` is what it
raises when the served side cannot be measured. Used by ``maze-serve adapters verify --parity`` and
``maze-train watch``. Uses the adapters room's face.
"""

from serving.parity.measure import Gateway, ParityError, check_served

__all__ = ["Gateway", "ParityError", "check_served"]
