"""The embedded gateway under hostile input: no SSRF through /v1/episodes, image bombs refused before
the engine, OpenAI's validation, a schemathesis fuzz of the OpenAPI schema, and `down` then `up`.

Uses the session's embedded stack (conftest.py ``stack``); the last test restarts it.
"""

from __future__ import annotations

import json
import os
import random
import time

import httpx
import pytest

from serving.ingress import parse_header
from serving.local import embedded
from serving.local.processes import port_free
from tests.support.net_trap import ConnectionTrap
from tests.support.gateway_stack import KEY, bomb_png_url, image_messages

pytestmark = pytest.mark.slow
FUZZ_EXAMPLES = int(os.environ.get("MAZE_FUZZ_EXAMPLES", "15"))  # per operation and generation mode
FUZZ_BUDGET_S = 100.0
# Hypothesis' seed for the fuzz draws: a new one each run (the breadth), printed, and taken from
# MAZE_FUZZ_SEED to replay a run's draws (with the same MAZE_FUZZ_EXAMPLES and schema).
FUZZ_SEED_ENV = "MAZE_FUZZ_SEED"


def _error_shaped(response: httpx.Response | object) -> bool:
    try:
        err = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(err, dict) and isinstance(err.get("message"), str) and isinstance(err.get("type"), str) \
        and "code" in err


def test_episode_ignores_a_hostile_host_header(stack):
    """The gateway plays the episode in-process: nothing connects to the address the Host header names,
    and the caller's key is not sent anywhere."""
    model = f"{stack.base}:{next(iter(stack.assets.shipped))}"
    with ConnectionTrap() as trap:
        r = httpx.post(stack.root + "/v1/episodes", timeout=300,
                       headers={"Host": f"127.0.0.1:{trap.port}", "Authorization": f"Bearer {KEY}"},
                       json={"model": model, "seed": 1, "max_turns": 3})
        time.sleep(0.5)
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["turns"]) >= 1 and body["stop_reason"] != "error", body.get("error")
    assert trap.received == [], trap.received


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/embeddings"])
def test_pixel_bomb_refused_before_the_engine(stack, route):
    """A ~17 KB PNG declaring 12000 x 12000 pixels: 413 from the ingress's checks, the replica never
    reached, in milliseconds of the gateway's own time (vLLM would decode 432 MB). The time is the
    response's Server-Timing ``total`` (the ingress's first middleware to the response start), not
    the client's clock: a test process kept off the cores would count its own wait."""
    body = {"model": stack.base, "messages": image_messages(url=bomb_png_url(12000, 12000))}
    if route.endswith("completions"):
        body["max_tokens"] = 1
    t0 = time.perf_counter()
    r = stack.http.post(route, json=body)
    elapsed_ms = (time.perf_counter() - t0) * 1000
    parts = parse_header(r.headers["server-timing"])
    print(f"\n{route}: bomb answered {r.status_code} in {elapsed_ms:.0f} ms (gateway total "
          f"{parts['total']['dur']:.0f} ms: {sorted(parts)})")
    assert r.status_code == 413, r.text
    err = r.json()["error"]
    assert err["code"] == "image_too_large" and "12000x12000" in err["message"]
    assert "checks" in parts and not {"queue", "load", "prefill"} & set(parts), parts  # refused before the replica
    assert parts["total"]["dur"] < 2000, parts


@pytest.mark.parametrize(("body", "status", "code", "text"), [
    ({"messages": [{"role": "user", "content": "hi"}]}, 400, "missing_required_parameter", "model"),
    ({"model": "{base}", "messages": [{"role": "wizard", "content": "hi"}]}, 400, "bad_request", "wizard"),
    ({"model": "{base}", "messages": []}, 400, "bad_request", "at least one message"),
    ({"model": "{base}", "messages": [{"role": "user", "content": "hi"}], "n": 1000}, 400, "bad_request", "n: 1000"),
    ({"model": "{base}", "messages": [{"role": "user", "content": [
        {"type": "image_embeds", "image_embeds": "AAAA"}]}]}, 400, "bad_request", "image_embeds"),
    ({"model": "{base}", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,bm90IGFuIGltYWdl"}}]}]},
     400, "invalid_image", "not a readable image"),
    # A fuzz run's 500: vLLM's request model calls list() on tool_calls before it checks its type.
    ({"model": "{base}", "messages": [{"role": "user", "content": "hi"},
                                      {"role": "assistant", "content": "x", "tool_calls": 9557459}]},
     400, "bad_request", "messages[1].tool_calls"),
])
def test_openai_validation(stack, body, status, code, text):
    if "model" in body:
        body = {**body, "model": body["model"].format(base=stack.base)}
    r = stack.http.post("/v1/chat/completions", json={**body, "max_tokens": 1})
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == code and text in err["message"], err


def _fuzz_cases(schema, base: str, seed: int):
    """Generated cases per operation and mode (schemathesis' strategies, drawn by Hypothesis from
    ``seed``: the same seed, examples and schema draw the same cases)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis.errors import Unsatisfiable
    from schemathesis.generation.modes import GenerationMode

    for result in schema.get_all_operations():
        op = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            cases: list = []

            @hypothesis_seed(seed)
            @settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None, phases=[Phase.generate],
                      suppress_health_check=list(HealthCheck))
            @given(op.as_strategy(generation_mode=mode))
            def draw(case):
                cases.append(case)  # noqa: B023 - drawn and used within this iteration

            try:
                draw()
            except Unsatisfiable:  # e.g. no invalid input exists for a parameterless GET
                pass
            for i, case in enumerate(cases):
                # Half the valid engine requests name the served base, so they reach vLLM (not just a
                # 404 for a random model name); their token counts are capped to keep the run short.
                if mode == GenerationMode.POSITIVE and isinstance(case.body, dict) and i % 2 == 0 \
                        and "episodes" not in op.path:
                    case.body["model"] = base
                    for key in ("max_tokens", "max_completion_tokens"):
                        if isinstance(case.body.get(key), int):
                            case.body[key] = min(case.body[key], 4)
                yield op, mode, case


def _replayable(op, mode, case, response, seed: int) -> str:
    """A failing case in full: what was sent (the whole body, as JSON where it is JSON), what came
    back, and how to draw it again."""
    from schemathesis.core import NotSet

    try:  # ascii: lone surrogates and control characters stay readable and copyable
        body = "(none)" if isinstance(case.body, NotSet) else json.dumps(case.body, ensure_ascii=True)
    except (TypeError, ValueError):
        body = repr(case.body)
    sent = {"method": case.method, "path": case.formatted_path, "query": dict(case.query or {}),
            "headers": dict(case.headers or {})}
    return (f"{op.label} [{mode}] -> {response.status_code} {response.text[:2000]}\n"
            f"  request: {json.dumps(sent, default=str)}\n  body: {body}\n"
            f"  replay: {FUZZ_SEED_ENV}={seed} MAZE_FUZZ_EXAMPLES={FUZZ_EXAMPLES} (or send the body above)")


def test_fuzz_openapi_no_5xx_and_openai_shaped_4xx(stack):
    """schemathesis against the running gateway's own OpenAPI schema: no 5xx, every 4xx OpenAI-shaped.
    The draws are random per run; the seed is printed, and each failing case with its full body."""
    import requests
    import schemathesis

    seed = int(os.environ.get(FUZZ_SEED_ENV) or random.randrange(2**32))
    print(f"\nfuzz: hypothesis seed {seed} (replay: {FUZZ_SEED_ENV}={seed} MAZE_FUZZ_EXAMPLES={FUZZ_EXAMPLES})")
    schema_json = stack.http.get("/openapi.json").json()
    schema = schemathesis.openapi.from_dict(schema_json)
    session = requests.Session()
    headers = {"Authorization": f"Bearer {KEY}"}
    sent, statuses, bad = 0, {}, []
    deadline = time.monotonic() + FUZZ_BUDGET_S
    try:
        for op, mode, case in _fuzz_cases(schema, stack.base, seed):
            if time.monotonic() > deadline:
                break
            response = case.call(base_url=stack.root, session=session, headers=headers, timeout=120)
            sent += 1
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            if response.status_code >= 500 or (400 <= response.status_code < 500 and not _error_shaped(response)):
                bad.append(_replayable(op, mode, case, response, seed))
                print(f"fuzz: failing case\n{bad[-1]}")  # in the captured output even if a later step fails
    finally:
        session.close()
    print(f"\nfuzz: {sent} requests, statuses {dict(sorted(statuses.items()))}, seed {seed}")
    assert sent >= 50, f"only {sent} requests in the time budget (seed {seed})"
    assert not bad, f"{len(bad)} failing cases (hypothesis seed {seed}):\n" + "\n".join(bad[:10])
    assert stack.http.get("/health").status_code == 200  # still serving


def test_stack_logs_are_files_listed_by_maze_serve_logs(stack):
    """Ray's, vLLM's and the deploying driver's output goes to files under MAZE_HOME, not the console."""
    import click
    from click.testing import CliRunner

    from serving.cli import main

    listed = CliRunner().invoke(main, ["logs"])
    assert listed.exit_code == 0, listed.output
    names = {line.rsplit("/", 1)[-1] for line in listed.output.splitlines()}
    assert {"deploy.log", "moto.log", "ray.log"} <= names, names
    assert any("/logs/serve/" in line for line in listed.output.splitlines())  # Ray's Serve controller and replicas
    written = next(p for p in embedded.log_files() if p.stat().st_size > 0)
    tail = CliRunner().invoke(main, ["logs", str(written), "-n", "5"])
    assert tail.exit_code == 0 and tail.output.strip(), tail.output
    # The CLI writes through click, which drops colour codes (the S3 server colours its 4xx lines).
    assert set(tail.output.splitlines()) <= {click.unstyle(line) for line in written.read_text(errors="replace").splitlines()}
    assert CliRunner().invoke(main, ["logs", "nope.log"]).exit_code == 2


def test_down_returns_when_everything_is_gone_and_up_follows(stack):
    """`down` returns only once every process and port of the stack is free; `up` right after works."""
    import psutil

    state = embedded.read_state()
    ports = embedded.stack_ports(state)
    stack.close_connections()  # idle keep-alive connections would hold the port in TIME_WAIT for a minute
    t0 = time.monotonic()
    assert embedded.down() is True
    down_s = time.monotonic() - t0
    left = [p.pid for p in psutil.process_iter() if _sid(p.pid) in (state.ray_pid, state.moto_pid) and _running(p)]
    assert left == []
    # Bindable as each server binds it: the direct-ingress replica without SO_REUSEADDR, the rest with it.
    assert all(port_free(port, reuse=role != "HTTP" or stack.cfg.ingress != "direct")
               for role, port in ports.items()), ports
    t0 = time.monotonic()
    base_url = embedded.up(stack.cfg, adapters=stack.assets.shipped)
    print(f"\ndown {down_s:.1f}s, up again {time.monotonic() - t0:.0f}s")
    assert base_url == stack.base_url
    assert stack.first_logprobs(stack.base)


def _running(proc) -> bool:
    """Alive and not a zombie (an exited process whose parent has not reaped it yet holds nothing)."""
    import psutil

    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _sid(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None
