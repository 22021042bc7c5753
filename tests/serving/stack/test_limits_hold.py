"""Limits that hold on the real embedded gateway (the `stack` fixture, the tenants' key file of
tests/support/gateway_stack.py re-read every `auth.reload_s`): a key of two concurrent slots that
opens more server-side episodes than that gets 429s for the rest while its episodes play to their
end, and a stream the client closes before its end (with or without `include_usage`) and a JSON
request it stops waiting for are charged the tokens they used (`/v1/usage`)."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.support.gateway_stack import image_messages, write_tenant_keys

pytestmark = pytest.mark.slow
SLOTS_KEY = "sk-two-slots-test-0001"
SLOTS = {"name": "two-slots", "role": "inference", "models": ["maze-tiny", "maze-tiny:maze-grpo"],
         "secrets": [SLOTS_KEY], "limits": {"concurrent": 2}}
TEXT = [{"role": "user", "content": "You are in a maze. Move?"}]
REFUSED = "Rate limit reached for key 'two-slots' on concurrent requests: limit 2. Please try again in 1s."


def http(stack) -> httpx.Client:
    return httpx.Client(base_url=stack.root, headers={"Authorization": f"Bearer {SLOTS_KEY}"}, timeout=300)


def wait_status(stack, expected: int, within_s: float) -> None:
    """Polls until the key is answered ``expected``; fails when a request sent ``within_s`` or later
    is still answered otherwise (the bound is on the request, not on when this process read it)."""
    deadline = time.monotonic() + within_s
    with http(stack) as h:
        while True:
            sent = time.monotonic()
            if (got := h.get("/v1/models").status_code) == expected:
                return
            assert sent < deadline, f"still {got}, not {expected}"
            time.sleep(0.2)


@pytest.fixture(scope="module")
def two_slots(stack):
    """The key of two slots added to the stack's key file; the tenants' file restored at the end."""
    path = Path(stack.cfg.auth.keys_file)
    write_tenant_keys(path, extra=[SLOTS])
    wait_status(stack, 200, 3 * stack.cfg.auth.reload_s + 5)
    try:
        yield SLOTS_KEY
    finally:
        write_tenant_keys(path)
        wait_status(stack, 401, 3 * stack.cfg.auth.reload_s + 5)


def test_episodes_beyond_the_key_slots_are_429(stack, two_slots):
    model = f"{stack.base}:maze-grpo"
    start = threading.Barrier(5)

    def episode(seed: int) -> httpx.Response:
        with http(stack) as h:
            start.wait()
            # window:2 keeps each request within the stack's images per request (4); 12 turns or fewer
            return h.post("/v1/episodes", json={"model": model, "seed": seed, "env_id": "maze_2d/hard",
                                                "history": "window:2", "max_turns": 12})

    with ThreadPoolExecutor(5) as pool:
        answers = list(pool.map(episode, range(5)))
    statuses = sorted(r.status_code for r in answers)
    print("episodes:", statuses)
    played, refused = [r for r in answers if r.status_code == 200], [r for r in answers if r.status_code == 429]
    assert len(played) >= 2 and len(refused) >= 1 and len(played) + len(refused) == 5, statuses
    for r in refused:
        assert r.json() == {"error": {"message": REFUSED, "type": "requests", "code": "rate_limit_exceeded"}}
        assert r.headers["retry-after"] == "1"
    for r in played:  # their own calls ran in the slots they held: none was refused
        record = r.json()
        assert record["error"] is None and len(record["turns"]) >= 1, record


def usage_totals(stack) -> dict[str, int]:
    """The key's usage of the base model (its own usage reads are counted under ``-``)."""
    with http(stack) as h:
        rows = [r for r in h.get("/v1/usage", params={"since": "1h"}).json()["data"] if r["model"] == stack.base]
    return {c: sum(r[c] for r in rows) for c in ("requests", "prompt_tokens", "completion_tokens")}


def charged_since(stack, before: dict[str, int], within_s: float = 30) -> dict[str, int]:
    """The tokens charged to the key since ``before``, once its next request is recorded (when the
    replica sees it end)."""
    deadline = time.monotonic() + within_s
    while (after := usage_totals(stack))["requests"] == before["requests"]:
        assert time.monotonic() < deadline, (before, after)
        time.sleep(0.5)
    return {c: after[c] - before[c] for c in ("prompt_tokens", "completion_tokens")}


def answered_prompt_tokens(stack) -> int:
    """The prompt tokens the engine reports for TEXT in an answer."""
    with http(stack) as h:
        resp = h.post("/v1/chat/completions", json={"model": stack.base, "messages": TEXT, "max_tokens": 1})
    assert resp.status_code == 200, resp.text
    return resp.json()["usage"]["prompt_tokens"]


def test_a_stream_closed_early_is_charged(stack, two_slots):
    before = usage_totals(stack)
    body = {"model": stack.base, "messages": image_messages(), "max_tokens": 400, "ignore_eos": True,
            "temperature": 1.0, "stream": True}
    got = []
    with http(stack) as h, h.stream("POST", "/v1/chat/completions", json=body) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["delta"].get("content"):
                got.append(line)
                break  # the client has what it needs and leaves
    assert got and '"usage"' not in got[0]  # the usage the gateway asked for stays hidden
    charged = charged_since(stack, before)
    print("charged for the stream closed early:", charged)
    # Charged, never free: the tokens the gateway sent before it saw the client go (all 400 when the small
    # engine finished the stream before the disconnect reached the replica, which the timing decides).
    assert charged["prompt_tokens"] > 0 and 1 <= charged["completion_tokens"] <= 400, charged


def test_a_stream_asking_for_usage_closed_after_its_first_chunk_is_charged_its_prompt(stack, two_slots):
    """The client asked for usage at the end (``include_usage``) and left after the first chunk: the
    gateway asked the engine for usage in every chunk all the same, so the prompt is charged, while
    the client saw no chunk usage (it did not ask for it)."""
    prompt = answered_prompt_tokens(stack)
    before = usage_totals(stack)
    body = {"model": stack.base, "messages": TEXT, "max_tokens": 400, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    with http(stack) as h, h.stream("POST", "/v1/chat/completions", json=body) as resp:
        assert resp.status_code == 200
        first = next(line for line in resp.iter_lines() if line.startswith("data: {"))
    assert '"usage"' not in first, first
    charged = charged_since(stack, before)
    print("charged for the include_usage stream closed after its first chunk:", charged, "prompt:", prompt)
    assert charged["prompt_tokens"] == prompt and 0 <= charged["completion_tokens"] <= 400, charged


def left_before_the_answer(stack, body: dict, wait_s: float) -> bool:
    """Send a JSON request and stop waiting after ``wait_s``: True when the client left before any of
    the answer came, False when the whole answer was read (the client's own timer fired late)."""
    with httpx.Client(base_url=stack.root, headers={"Authorization": f"Bearer {SLOTS_KEY}"},
                      timeout=httpx.Timeout(60, read=wait_s)) as h:
        try:
            resp = h.post("/v1/chat/completions", json=body)
        except httpx.ReadTimeout:
            return True
    assert resp.status_code == 200, resp.text
    return False


def test_a_json_request_left_before_its_answer_is_charged_its_prompt(stack, two_slots):
    """The client stops waiting for a long JSON answer: the request is charged its prompt, counted by
    the engine's tokenizer when Serve cancels it (no completion tokens are reported then), or read
    from the answer when the engine finishes it regardless (prompt and completion). The embedded
    stack is colocated: the cancellation reaches vLLM in the ingress's own task, which answers it
    with an error, and its ``tokenize`` is the one vLLM 0.32 names anew (docs/serving.md, token limits).

    The answer takes ~14 s on CPU and the client leaves after 1 s by its read timeout, which its own
    process keeps: on a loaded machine that process can be off the cores until the answer is in, and
    then it reads the answer instead of leaving. That try did not play the case, so the case is played
    again (at most three tries); the charge of every try is checked."""
    prompt = answered_prompt_tokens(stack)
    body = {"model": stack.base, "messages": TEXT, "max_tokens": 2000, "ignore_eos": True}
    for _ in range(3):
        before = usage_totals(stack)
        left = left_before_the_answer(stack, body, wait_s=1.0)
        charged = charged_since(stack, before, within_s=180)  # an engine that finishes it: 2000 tokens on CPU
        print("charged for the JSON request", "left before" if left else "read to", "its answer:", charged,
              "prompt:", prompt)
        if not left:  # answered in full: the whole answer is charged
            assert charged == {"prompt_tokens": prompt, "completion_tokens": 2000}, charged
            continue
        assert charged["prompt_tokens"] == prompt and 0 <= charged["completion_tokens"] <= 2000, charged
        return
    pytest.fail("the client read the whole answer in each of three tries instead of leaving after 1 s")
