"""The Server-Timing header (serving.ingress.server_timing, the replica's side serving.engine.replica_timing)
without Ray or an engine: its syntax both ways, the ingress's phases adding up to its total, the
replica's parts travelling with the first item (and with an error), vLLM's first-token instant, and
the header on the app's responses.
The stack's own header is checked in tests/serving/stack/test_server_timing.py."""

from __future__ import annotations

import asyncio
import pickle
import time
import types

import pytest

from serving.config import ServingConfig
from serving.engine import replica_timing as rt
from serving.ingress import server_timing as st


# -- syntax --------------------------------------------------------------------------------------
def test_format_then_parse_round_trips_in_order():
    text = st.format_header({"total": 0.0452, "queue": 0.0023, "auth": 0.0004, "custom": 0.001})
    assert text.startswith('auth;desc="API key and limits";dur=0.400, queue;')
    assert text.endswith(", custom;dur=1.000")  # a name without a description keeps just its dur
    parsed = st.parse_header(text)
    assert list(parsed) == ["auth", "queue", "total", "custom"]
    assert parsed["queue"] == {"desc": "Serve routing and queue", "dur": 2.3}
    assert parsed["total"]["dur"] == 45.2 and parsed["custom"]["desc"] is None


def test_parse_takes_the_rfc_syntax():
    parsed = st.parse_header('cache;desc="a, \\"quoted\\" text";dur=1.5 ,  miss,db ; dur = 53')
    assert parsed["cache"] == {"desc": 'a, "quoted" text', "dur": 1.5}
    assert parsed["miss"] == {"dur": None, "desc": None}
    assert parsed["db"]["dur"] == 53.0
    assert st.parse_header("") == {}
    assert list(st.parse_header("a;dur=1, a;dur=2").values()) == [{"dur": 1.0, "desc": None}]  # first one wins
    for bad in ("a;dur=1 b", ";dur=1", 'a;desc="open'):
        with pytest.raises(ValueError):
            st.parse_header(bad)


# -- the ingress's phases ------------------------------------------------------------------------
def _parts(timing: st.RequestTiming) -> dict[str, float]:
    return {k: v["dur"] for k, v in st.parse_header(timing.header().decode()).items()}


def test_phases_add_up_to_the_total():
    timing = st.RequestTiming()
    for phase in ("auth", "gateway", "resolve", "checks", "queue"):
        time.sleep(0.002)
        timing.enter(phase)
    time.sleep(0.003)
    timing.replica({"prefill": 0.001, "decode": 0.001})  # the replica's share of the 3 ms in `queue`
    parts = _parts(timing)
    total = parts.pop("total")
    assert set(parts) == {"auth", "gateway", "resolve", "checks", "queue", "prefill", "decode"}
    assert abs(sum(parts.values()) - total) < 0.01  # ms: rounding only
    assert parts["prefill"] == parts["decode"] == 1.0 and parts["queue"] >= 0.9


def test_replica_parts_never_exceed_what_the_ingress_waited():
    timing = st.RequestTiming()
    timing.enter("queue")
    time.sleep(0.002)
    timing.replica({"prefill": 1.0, "decode": 1.0})  # no clock could make this true: scaled to the wait
    parts = _parts(timing)
    assert parts["queue"] == 0.0 and parts["prefill"] == parts["decode"] < 5
    assert abs(sum(v for k, v in parts.items() if k != "total") - parts["total"]) < 0.01


def test_enter_and_unstamp_outside_a_request_do_nothing():
    st.enter("auth")
    assert st.unstamp(rt.Stamped("x", {"prefill": 1.0})) == "x"
    assert st.unstamp("y") == "y"


def test_an_unstamped_first_item_ends_the_queue():
    timing = st.RequestTiming()
    token = st.TIMING.set(timing)
    try:
        timing.enter("queue")
        assert st.unstamp(["data: {}\n\n"]) == ["data: {}\n\n"]
        assert timing.phase == "gateway" and "queue" in timing.parts
    finally:
        st.TIMING.reset(token)


# -- the replica's side --------------------------------------------------------------------------
async def _items(*items, fail: Exception | None = None):
    for item in items:
        yield item
    if fail is not None:
        raise fail


def test_stamped_wraps_the_first_item_and_survives_pickling():
    clock = rt.ReplicaClock(adapter=True, stream=True)
    clock.loaded, clock.first_token = clock.received + 0.001, clock.received + 0.002

    async def run():
        return [x async for x in rt.stamped(_items(["a"], ["b"]), clock)]

    first, second = asyncio.run(run())
    assert isinstance(first, rt.Stamped) and first.item == ["a"] and second == ["b"]
    assert set(first.parts) == {"load", "prefill", "batch"}
    again = pickle.loads(pickle.dumps(first))  # what crosses from the LLM replica to the ingress
    assert again.item == ["a"] and again.parts == first.parts


def test_replica_clock_parts():
    clock = rt.ReplicaClock(adapter=False, stream=False)
    assert set(clock.parts()) == {"prefill"}  # no token yet (an error): all of it before one
    clock.first_token = time.time() - 0.5  # before it arrived (another clock): counted from arrival
    parts = clock.parts()
    assert set(parts) == {"prefill", "decode"} and parts["prefill"] == 0.0


def test_an_error_carries_the_replica_parts_back():
    clock = rt.ReplicaClock(adapter=True, stream=False)
    timing = st.RequestTiming()
    token = st.TIMING.set(timing)

    async def run():
        async for _ in rt.stamped(_items(fail=RuntimeError("engine dead")), clock):
            pass

    try:
        timing.enter("queue")
        with pytest.raises(RuntimeError) as info:
            asyncio.run(run())
        st.unstamp_error(pickle.loads(pickle.dumps(info.value)))
        assert {"load", "prefill"} <= set(timing.parts) and timing.phase == "gateway"
    finally:
        st.TIMING.reset(token)


class _Client:
    """An engine client whose generate yields vLLM-like outputs (``metrics`` or none)."""

    def __init__(self, metrics):
        self.metrics = metrics

    def generate(self, prompt, params, request_id):
        async def outputs():
            for i in range(3):
                yield types.SimpleNamespace(request_id=request_id, metrics=self.metrics, i=i)
        return outputs()


def test_first_token_is_vllm_s_own_instant():
    now = time.time()
    client = _Client(types.SimpleNamespace(arrival_time=now - 0.3, first_token_latency=0.1))
    rt.time_first_token(client)
    clock = rt.ReplicaClock(adapter=False, stream=False)

    async def run(with_clock: bool):
        token = rt.REPLICA_CLOCK.set(clock) if with_clock else None
        try:
            return [o.i async for o in client.generate("p", None, "r1")]
        finally:
            if token is not None:
                rt.REPLICA_CLOCK.reset(token)

    assert asyncio.run(run(False)) == [0, 1, 2] and clock.first_token is None  # no request clock: untouched
    assert asyncio.run(run(True)) == [0, 1, 2]
    assert clock.first_token == pytest.approx(now - 0.2)
    bare = _Client(None)  # vLLM without stats: the first output's arrival
    rt.time_first_token(bare)
    clock.first_token = None
    asyncio.run(run(True))
    assert clock.first_token is not None


# -- on the app's responses -----------------------------------------------------------------------
def test_every_response_carries_the_header(monkeypatch):
    """Answers, errors of the outer middleware (413), of the key gate (401) and of the app (404), with
    `auth` bracketing the gate; each header's parts add up to its total."""
    from fastapi.testclient import TestClient

    from serving.ingress import create_app

    monkeypatch.setenv("MAZE_TEST_TIMING_KEYS", "k" * 32)
    cfg = ServingConfig.shipped("embedded").model_dump(mode="json")
    app = create_app(ServingConfig.model_validate({**cfg, "auth": {"api_keys_env": "MAZE_TEST_TIMING_KEYS"}}))

    @app.get("/v1/slow")
    async def slow():
        st.enter("resolve")
        await asyncio.sleep(0.01)
        st.enter("gateway")
        return {"ok": True}

    client = TestClient(app, raise_server_exceptions=False)
    key = {"Authorization": "Bearer " + "k" * 32}
    answers = {"ok": client.get("/v1/slow", headers=key), "401": client.get("/v1/slow"),
               "413": client.post("/v1/chat/completions", content=b"x" * (3 * 2**23), headers=key),
               "404": client.get("/v1/nowhere", headers=key)}
    assert [r.status_code for r in answers.values()] == [200, 401, 413, 404]
    for name, r in answers.items():
        parts = {k: v["dur"] for k, v in st.parse_header(r.headers["server-timing"]).items()}
        total = parts.pop("total")
        assert abs(sum(parts.values()) - total) < 0.01, (name, parts, total)
    ok = st.parse_header(answers["ok"].headers["server-timing"])
    assert {"auth", "resolve", "gateway"} <= set(ok) and ok["resolve"]["dur"] >= 10
    assert "auth" in st.parse_header(answers["401"].headers["server-timing"])
    assert "auth" not in st.parse_header(answers["413"].headers["server-timing"])  # refused before the gate
