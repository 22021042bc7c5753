"""The grouped CPU LoRA kernels (serving.engine.lora_kernels) inside the running embedded gateway.

* They run where the model runs: vLLM's worker process logs that it uses them.
* A batch that mixes the base model and several adapters (the grouped kernels) gives each request
  what it gets alone (one adapter's rows: merged weights, serving.engine.lora_merge).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from serving.local import embedded

pytestmark = pytest.mark.slow


def _engine_log_lines(pattern: str) -> list[str]:
    state = embedded.read_state()
    assert state is not None
    logs = Path(state.ray_temp_dir) / "session_latest" / "logs"
    hits = []
    for f in [*logs.glob("worker-*.out"), *logs.glob("worker-*.err")]:
        hits += [line for line in f.read_text(errors="replace").splitlines() if pattern in line]
    return hits


def test_the_engine_worker_uses_the_grouped_kernels(stack):
    assert stack.cfg.cpu_lora_kernels == "grouped"  # unset in the embedded config: the CPU default
    stack.first_logprobs(f"{stack.base}:maze-grpo")  # the engine has run an adapter step
    assert _engine_log_lines("Using GroupedPunicaWrapperCPU")
    assert _engine_log_lines("grouped CPU LoRA kernels active")
    assert stack.cfg.lora.cpu_merged_slots == 2  # the embedded config: single-adapter steps on merged weights
    assert _engine_log_lines("merged LoRA weights for single-adapter steps (up to 2 slots)")


def test_mixed_batch_gives_each_request_its_own_model(stack):
    for name, folder in zip(("kern-a", "kern-b"), stack.assets.extra[:2], strict=True):
        stack.push(folder, name)
    models = [stack.base, f"{stack.base}:maze-grpo", f"{stack.base}:kern-a", f"{stack.base}:kern-b"]
    alone = {m: stack.first_logprobs(m) for m in models}
    assert len({tuple(v) for v in alone.values()}) == len(models)  # four different models
    with ThreadPoolExecutor(len(models) * 3) as pool:  # sent together: vLLM batches them
        together = list(pool.map(stack.first_logprobs, models * 3))
    for model, got in zip(models * 3, together, strict=True):
        want = alone[model]
        assert [t for t, _ in got] == [t for t, _ in want], model
        assert all(abs(a - b) <= 2e-3 for (_, a), (_, b) in zip(got, want, strict=True)), (model, got, want)
