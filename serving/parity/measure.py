"""Served parity of one adapter version: does the gateway serve ``base:name@version`` as it was trained?

On the fixed maze frames (:mod:`serving.parity.frames`) the gateway's first token's top-5 logprobs
for the version are compared with

* the HF + peft reference computed from the version's own files (:mod:`serving.parity.reference`),
  where the base's weights are readable here: the version passes when every frame's top token
  agrees and no logprob of a token in both top-5 lists differs by more than the tolerance (float32's
  for a float32 engine, wider for a bfloat16 or float16 one, whose own rounding moves its logprobs);
* the base's served output, always (the cheap check): an adapter with non-zero weights whose served
  output equals the base's on every frame is served as the base, whatever the reference says.

Where no reference can be computed (the base's weights are not on this machine, as for a GPU base
read from a hub) and the cheap check passes, the version is *not compared* (``ok`` null), never
``ok``: the check says it changes the served output, not that it answers as trained.

The result is a :class:`~serving.adapters.ParityRecord` the store keeps per version
(:meth:`~serving.adapters.AdapterStore.record_parity`), which every move that starts a version
serving consults.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import httpx

from serving.adapters import NOT_COMPARED, AdapterStore, ModelId, ParityRecord, inspect_adapter, now
from serving.config import BaseModelSpec, ServingConfig
from serving.parity.frames import parity_frames
from serving.parity.reference import TopK, reference_available, reference_top_logprobs

TOLERANCE = 0.02  # per top-5 logprob: a float32 engine against float32 HF
# A bfloat16 or float16 engine rounds every activation, and its logprobs sit up to 0.1 from the float32
# reference on the parity frames when it serves a version as trained, so the float32 tolerance fails
# every 16-bit engine; 0.15 keeps a margin over that (the calibration: benchmarks/parity_dtype.py).
TOLERANCE_16BIT = 0.15
SAME_AS_BASE = 1e-3  # below this everywhere, the served adapter is the base


@dataclass(frozen=True)
class Gateway:
    """Where to ask for the served side: the gateway's OpenAI base URL (``.../v1``) and a key."""

    url: str
    api_key: str | None = None
    timeout_s: float = 120.0


def served_top_logprobs(gateway: Gateway, model: str, conversations, k: int = 5) -> list[TopK]:
    """The gateway's first token's top-``k`` (token, logprob) for ``model`` per conversation (greedy)."""
    headers = {"Authorization": f"Bearer {gateway.api_key}"} if gateway.api_key else {}
    out = []
    with httpx.Client(base_url=gateway.url.rstrip("/"), headers=headers, timeout=gateway.timeout_s) as http:
        for messages in conversations:
            resp = http.post("/chat/completions", json={"model": model, "messages": messages, "max_tokens": 1,
                                                         "temperature": 0, "logprobs": True, "top_logprobs": k})
            if resp.status_code != 200:
                raise ParityError(f"the gateway answered {resp.status_code} for {model}: {_message(resp)}")
            top = resp.json()["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
            out.append([(t["token"], float(t["logprob"])) for t in top])
    return out


class ParityError(RuntimeError):
    """The served side could not be measured (the gateway refused or failed the request)."""


def _message(resp: httpx.Response) -> str:
    try:
        return resp.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return resp.text[:200]


def _token(text: str) -> str:
    # A token that is part of a UTF-8 character decodes to U+FFFD under HF and to "" under vLLM.
    return text.replace("\ufffd", "")


def tolerance_for(spec: BaseModelSpec) -> float:
    """The parity tolerance of base ``spec``'s engine: float32's only where its config asks for float32
    (:attr:`~serving.config.BaseModelSpec.float32_engine`), else 16-bit's."""
    return TOLERANCE if spec.float32_engine else TOLERANCE_16BIT


def difference(a: TopK, b: TopK, tolerance: float = TOLERANCE) -> tuple[float, bool]:
    """Largest |logprob difference| over the tokens in both top lists, and whether the top tokens agree
    (a tie within ``tolerance`` counts as agreeing)."""
    other = {_token(t): v for t, v in b}
    shared = [abs(v - other[_token(t)]) for t, v in a if _token(t) in other]
    same_top = _token(a[0][0]) == _token(b[0][0]) or (
        _token(a[0][0]) in other and abs(other[_token(a[0][0])] - b[0][1]) <= tolerance)
    return (max(shared) if shared else float("inf")), same_top


def compare(served: list[TopK], reference: list[TopK], tolerance: float = TOLERANCE) -> tuple[float, int]:
    """(max |difference| over every frame, frames whose top token differs beyond a ``tolerance`` tie)."""
    results = [difference(s, r, tolerance) for s, r in zip(served, reference, strict=True)]
    return max(d for d, _ in results), sum(not same for _, same in results)


def _adapter_is_nonzero(folder: Path) -> bool:
    """Whether any LoRA module of the adapter has non-zero weights (read from the raw bytes, so bf16 too)."""
    return bool(inspect_adapter(folder, base_source=None).trained)


def measure(store: AdapterStore, gateway: Gateway, base: str, base_folder: str | Path, name: str,
            version: str, tolerance: float = TOLERANCE) -> ParityRecord:
    """Measure ``base:name@version`` as served against its reference and the base (see the module), with
    the engine's ``tolerance`` (:func:`tolerance_for`)."""
    frames = list(parity_frames())
    with tempfile.TemporaryDirectory(prefix="parity-") as tmp:
        # The store's one download (streamed, hashed: files that are not the version are refused).
        folder = store.fetch(name, version, Path(tmp) / ModelId(None, name, version).folder)
        served = served_top_logprobs(gateway, str(ModelId(base, name, version)), frames)
        base_served = served_top_logprobs(gateway, base, frames)
        moved, _ = compare(served, base_served)
        if moved < SAME_AS_BASE and _adapter_is_nonzero(folder):
            return ParityRecord(ok=False, frames=len(frames), max_abs_diff=None, reference=NOT_COMPARED, at=now(),
                                detail=f"the served output equals the base's on all {len(frames)} frames, though "
                                       "the adapter's weights are not zero: it is served as the base")
        why_not = reference_available(base_folder)
        if why_not is not None:
            return ParityRecord(ok=None, frames=len(frames), max_abs_diff=None, reference=NOT_COMPARED, at=now(),
                                detail=f"not compared: served output differs from the base's; {why_not}")
        reference = reference_top_logprobs(base_folder, folder, frames)
    diff, top_mismatch = compare(served, reference, tolerance)
    ok = diff <= tolerance and top_mismatch == 0
    detail = (f"max |logprob difference| {diff:.4f} over {len(frames)} frames (tolerance {tolerance})"
              + (f"; top token differs on {top_mismatch}" if top_mismatch else ""))
    return ParityRecord(ok=ok, frames=len(frames), max_abs_diff=round(diff, 5) if diff != float("inf") else None,
                        reference="hf+peft", at=now(), detail=detail)


def measure_and_record(store: AdapterStore, gateway: Gateway, base: str, base_folder: str | Path, name: str,
                       version: str, tolerance: float = TOLERANCE) -> ParityRecord:
    """:func:`measure`, then keep the result with the version in the store (the record as kept)."""
    return store.record_parity(name, version, measure(store, gateway, base, base_folder, name, version, tolerance))


def check_served(cfg: ServingConfig, gateway: Gateway, name: str, version: str | None = None, *,
                 base: str | None = None, record: bool = True) -> tuple[str, ParityRecord]:
    """Measure ``name@version`` (default: the version served now) on the gateway of serving config ``cfg``
    against its base (default: the config's first) and keep the record unless ``record`` is off.
    Returns (version, record)."""
    from serving.adapters import export_s3_env

    spec = cfg.base(base) if base else cfg.base_models[0]
    if spec is None:
        raise ParityError(f"unknown base {base!r}: the serving config has {[m.id for m in cfg.base_models]}")
    export_s3_env(cfg)
    store = AdapterStore(cfg.adapters)
    version = version or store.resolve(name).version
    result = measure(store, gateway, spec.id, spec.resolved_source(), name, version,
                     tolerance_for(spec))
    return version, (store.record_parity(name, version, result) if record else result)


__all__ = ["SAME_AS_BASE", "TOLERANCE", "TOLERANCE_16BIT", "Gateway", "ParityError", "check_served", "compare", "difference", "measure",
           "measure_and_record", "served_top_logprobs", "tolerance_for"]
