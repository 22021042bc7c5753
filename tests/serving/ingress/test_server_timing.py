"""The Server-Timing header (serving.ingress.server_timing, the replica's side serving.engine.replica_timing)
without Ray or an engine: its syntax both ways, the ingress's phases adding up to its total, the
replica's parts travelling with the first item (and with an error), vLLM's first-token instant, the
header on the app's responses, and its ``total`` against the ingress's own measurement of the same
interval (the ``response_start`` metric), which no load can put above a correct ``total``.
The stack's own header is checked in tests/serving/stack/test_server_timing.py."""

from __future__ import annotations

import asyncio
import pickle
import time
import types

import pytest
from fastapi import Request  # at module level: the route's annotation is resolved in these globals

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
    t0 = time.perf_counter()
    timing.enter("queue")
    time.sleep(0.002)
    timing.replica({"prefill": 1e3, "decode": 1e3})  # no clock could make this true: scaled to the wait
    waited_ms = (time.perf_counter() - t0) * 1000  # at least the ingress's wait, however long a stall made it
    parts = _parts(timing)
    assert parts["queue"] == 0.0 and 1.0 <= parts["prefill"] == parts["decode"] <= waited_ms / 2 + 0.001
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


# -- the header against the ingress's own measurement --------------------------------------------
STEP = 0.005  # s: each stage of the test route lasts at least this long
ROUNDING_MS = 0.0005 * 12  # the header rounds each part to 1 us (half of that at most), a dozen parts


async def _asgi(app, path: str, *, body: bytes = b"", headers: dict | None = None, chunks: int = 1) -> dict:
    """One request through the app, its body uploaded in ``chunks`` parts ``STEP`` apart (a slow
    client, whose upload the ingress reads before anything else); the response's status and headers."""
    parts = [body[i * len(body) // chunks:(i + 1) * len(body) // chunks] for i in range(chunks)]
    done, sent = asyncio.Event(), []
    raw = {**(headers or {}), "content-type": "application/json", "content-length": str(len(body))}
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(k.encode(), v.encode()) for k, v in raw.items()],
             "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000)}

    async def receive():
        if parts:
            await asyncio.sleep(STEP)
            return {"type": "http.request", "body": parts.pop(0), "more_body": bool(parts)}
        await done.wait()  # a stream listens for the client leaving: it stays until the response ends
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            done.set()

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    return {"status": start["status"], "headers": {k.decode(): v.decode() for k, v in start["headers"]},
            "body": b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")}


def _timed_app(monkeypatch):
    """The gateway's app (create_app: key gate, its Phase marks, GatewayMiddleware) with a route that
    marks the engine routes' phases as GatewayIngress does, each lasting ``STEP`` or more, its
    replica parts stamped on the first item; and the metric observations the ingress made."""
    from starlette.responses import JSONResponse, StreamingResponse

    from serving.errors import AdapterLoadFailed
    from serving.ingress import create_app

    observed: list[tuple[str, float, dict]] = []
    # Ray's exported histogram holds buckets, not each request's value: the observation is read here.
    monkeypatch.setattr("serving.ingress.middleware.metric", lambda name: types.SimpleNamespace(
        inc=lambda *a, **k: None, observe=lambda value, tags=None: observed.append((name, value, tags))))
    monkeypatch.setenv("MAZE_TEST_TIMING_KEYS", "k" * 32)
    cfg = ServingConfig.shipped("embedded").model_dump(mode="json")
    app = create_app(ServingConfig.model_validate({**cfg, "auth": {"api_keys_env": "MAZE_TEST_TIMING_KEYS"}}))

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        for phase in ("resolve", "gateway", "checks", "queue"):
            st.enter(phase)
            await asyncio.sleep(STEP)
        if body.get("fail"):  # the replica raised: its parts come back on the exception
            exc = AdapterLoadFailed("adapter 'x' could not be loaded")
            rt.stamp_error(exc, {"load": STEP / 2})
            st.unstamp_error(exc)
            raise exc
        last = "batch" if body["stream"] else "decode"
        first = st.unstamp(rt.Stamped(b"data: {}\n\n", {"prefill": STEP / 2, last: STEP / 4}))
        await asyncio.sleep(STEP)  # the ingress builds the response
        if not body["stream"]:
            return JSONResponse({"ok": True})

        async def chunks():
            yield first
            await asyncio.sleep(STEP)
            yield b"data: [DONE]\n\n"
        return StreamingResponse(chunks(), media_type="text/event-stream")

    return app, observed


def test_total_is_never_less_than_the_ingress_s_own_time_to_the_response(monkeypatch):
    """The header's ``total`` against ``response_start``, the ingress's own reading of the same interval
    (its first middleware to the response's start, a metric the product exports): both come from one
    process's clock and the metric's stamps lie inside the header's, so no load can make a correct
    ``total`` the smaller, while a header that leaves any stage out (the slow client's upload, the
    wait for the replica, the response's building) falls short of it by at least that stage's ``STEP``.
    The parts add up to ``total``. Covered: JSON and stream answers, the replica's error, the gate's
    401 and the body limit's 413 (refused before the app)."""
    from serving.ingress.middleware import GatewayMiddleware

    app, observed = _timed_app(monkeypatch)
    assert app.user_middleware[0].cls is GatewayMiddleware  # outermost: no middleware of ours before its stamp
    key = {"authorization": "Bearer " + "k" * 32}
    slow = {"chunks": 2, "headers": key}
    requests = {  # name: (request, status, the least time the ingress must have spent before the start)
        "json": (dict(body=b'{"stream": false}', **slow), 200, 7 * STEP),
        "stream": (dict(body=b'{"stream": true}', **slow), 200, 7 * STEP),
        "error": (dict(body=b'{"stream": false, "fail": true}', **slow), 422, 6 * STEP),
        "401": (dict(body=b'{"stream": false}', chunks=2), 401, 2 * STEP),
        "413": (dict(body=b"x" * (3 * 2**23 + 1), headers=key), 413, 0.0),
    }

    async def run():
        out = {}
        for name, (kwargs, _, _) in requests.items():
            observed.clear()
            out[name] = (await _asgi(app, "/v1/chat/completions", **kwargs), list(observed))
        return out

    for name, (response, seen) in asyncio.run(run()).items():
        _, status, least = requests[name]
        assert response["status"] == status, (name, response)
        (measured,) = [value for metric, value, tags in seen
                       if metric == "response_start" and tags == {"route": "/v1/chat/completions"}]
        assert measured >= least, (name, measured)  # the measurement saw the stages it must have
        parts = {k: v["dur"] for k, v in st.parse_header(response["headers"]["server-timing"]).items()}
        total = parts.pop("total")
        assert total >= measured * 1000 - ROUNDING_MS, (name, total, measured * 1000, parts)
        assert all(d >= 0 for d in parts.values()) and abs(sum(parts.values()) - total) <= ROUNDING_MS, (name, parts)
        assert set(parts) >= {"json": {"auth", "queue", "prefill", "decode"}, "stream": {"queue", "prefill", "batch"},
                              "error": {"queue", "load"}, "401": {"auth"}}.get(name, {"gateway"}), (name, parts)
