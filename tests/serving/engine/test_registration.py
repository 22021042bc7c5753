"""The replica's registration of an adapter version with the engine (GatewayLLMServer._register).

The engine here is a stand-in (a real vLLM engine is what tests/serving/engine/test_lora_coverage.py
and the stack tests use): it records each registration and, like the coverage extension's wrapped
``add_lora``, leaves its coverage report in the adapter's folder. What is checked is the replica's
side: one registration and one coverage check per version, however many requests follow, and a
refused version stays refused without asking the engine again.
"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

from serving.engine.llm_server import GatewayLLMServer
from serving.engine.lora_coverage import REPORT_FILE
from serving.errors import AdapterNotApplied

APPLIED = {"registered": True, "applied": 16, "left_out": [], "tower_lora": False, "coverage_s": 1e-5}
LOST = {"registered": True, "applied": 16, "tower_lora": False, "coverage_s": 1e-5,
        "left_out": [{"module": "visual.blocks.0.attn.qkv", "group": "vision_tower", "zero": False}]}


class StandInEngine:
    """Records registrations; each leaves ``report`` in the folder, as the worker does."""

    def __init__(self, report: dict):
        self.report, self.registered, self.calls = report, [], 0
        self._oai_models = SimpleNamespace(lora_requests={})

    async def resolve_lora(self, disk):
        self.calls += 1
        if disk.model_id in self._oai_models.lora_requests:
            return
        await asyncio.sleep(0.01)  # concurrent first requests overlap here
        self.registered.append(disk.model_id)
        self._oai_models.lora_requests[disk.model_id] = SimpleNamespace(lora_int_id=len(self.registered))
        (disk.path / REPORT_FILE).write_text(json.dumps(self.report))


def replica(engine: StandInEngine) -> GatewayLLMServer:
    server = object.__new__(GatewayLLMServer)  # no engine start: only the registration path is exercised
    server.engine, server._lora_registrations, server._refused, server._lru = engine, {}, {}, None

    async def remove_from_engine(model_id):
        engine._oai_models.lora_requests.pop(model_id, None)

    server.remove_from_engine = remove_from_engine
    return server


def disk(tmp_path, model_id="maze-tiny:a@0123456789ab"):
    return SimpleNamespace(model_id=model_id, local_path=str(tmp_path), path=tmp_path)


async def test_a_resident_version_is_registered_and_checked_once(tmp_path):
    engine = StandInEngine(APPLIED)
    server, model = replica(engine), disk(tmp_path)
    await asyncio.gather(*(server._register(model.model_id, model) for _ in range(4)))  # concurrent first requests
    for _ in range(3):  # later requests of the resident version
        await server._register(model.model_id, model)
    assert engine.registered == [model.model_id] and engine.calls == 1
    assert not (tmp_path / REPORT_FILE).exists()  # the report was read and removed


async def test_a_refused_version_stays_refused_without_asking_the_engine_again(tmp_path, monkeypatch):
    monkeypatch.setattr("serving.engine.llm_server.module_count", lambda folder: 52)  # read only for the message
    engine = StandInEngine(LOST)
    server, model = replica(engine), disk(tmp_path)
    with pytest.raises(AdapterNotApplied, match="1 of 52 LoRA modules are in the vision tower"):
        await server._register(model.model_id, model)
    with pytest.raises(AdapterNotApplied):
        await server._register(model.model_id, model)
    assert engine.registered == [model.model_id] and engine.calls == 1
    assert model.model_id not in engine._oai_models.lora_requests  # nothing is served under it
