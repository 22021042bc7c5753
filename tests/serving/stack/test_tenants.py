"""Several teams on the real embedded gateway (the `stack` fixture: auth on, the tenants' keys of
tests/support/gateway_stack.py): scopes on every route, publishing rights through the gateway with
`maze-serve adapters --gateway`, a key's limit through the official `openai`
client, maze-eval under a limited key, usage per key, and the listeners the stack opens."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from click.testing import CliRunner

from serving.cli import main as serve_cli
from tests.support.gateway_stack import EVAL_KEY, OPS, RPM_KEY, SHORT_KEY, TEAM_A, TEAM_B, image_messages

pytestmark = pytest.mark.slow
TEXT = [{"role": "user", "content": "You are in a maze. Move?"}]


def client(stack, key: str, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.base_url, api_key=key, max_retries=kw.pop("max_retries", 0), timeout=120, **kw)


def http(stack, key: str | None) -> httpx.Client:
    return httpx.Client(base_url=stack.root, headers={"Authorization": f"Bearer {key}"} if key else {}, timeout=120)


def openai_shaped(resp: httpx.Response, status: int, code: str | None = None) -> dict:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "code"} and err["message"], err
    if code is not None:
        assert err["code"] == code, err
    return err


def cli(stack, key: str, *args: str):
    return CliRunner().invoke(serve_cli, ["adapters", "--gateway", stack.base_url, "--api-key", key, *args])


@pytest.fixture(scope="module")
def team_adapters(stack):
    """team-a-agent and team-b-agent, published by the admin through the gateway."""
    for name, folder in (("team-a-agent", stack.assets.extra[0]), ("team-b-agent", stack.assets.extra[1])):
        r = cli(stack, OPS, "push", str(folder), name, "--force")
        assert r.exit_code == 0, r.output
    time.sleep(stack.cfg.adapters.resolve_ttl_s + 0.2)
    return f"{stack.base}:team-a-agent", f"{stack.base}:team-b-agent"


def test_a_key_sees_and_calls_only_its_models(stack, team_adapters):
    own, other = team_adapters
    a = client(stack, TEAM_A)
    ids = {m.id for m in a.models.list().data}
    assert ids == {stack.base, own}, ids  # neither team B's adapter nor maze-grpo
    assert {m.id for m in client(stack, OPS).models.list().data} >= {stack.base, own, other, f"{stack.base}:maze-grpo"}
    assert a.chat.completions.create(model=own, messages=image_messages(), max_tokens=2).model.startswith(own + "@")
    expected = f"The model `{other}` does not exist or you do not have access to it."
    with pytest.raises(openai.NotFoundError) as info:
        a.chat.completions.create(model=other, messages=image_messages(), max_tokens=2)
    assert info.value.body == {"message": expected, "type": "invalid_request_error", "code": "model_not_found"}
    with pytest.raises(openai.NotFoundError):
        a.models.retrieve(other)
    with pytest.raises(openai.NotFoundError):
        a.completions.create(model=other, prompt="x", max_tokens=1)
    pinned = f"{other}@{stack.store.resolve('team-b-agent').version}"  # a pinned version is no way around
    with pytest.raises(openai.NotFoundError):
        a.chat.completions.create(model=pinned, messages=TEXT, max_tokens=1)
    with http(stack, TEAM_A) as h:
        err = openai_shaped(h.post("/v1/episodes", json={"model": other, "seed": 0, "max_turns": 1}), 404,
                            "model_not_found")
        assert err["message"] == expected
        board = h.get("/v1/leaderboard")
        assert board.status_code == 200 and all(r["model"] in (stack.base, own) for r in board.json()["data"])
        openai_shaped(h.get("/v1/adapters/team-b-agent/history"), 404)
        assert [r["name"] for r in h.get("/v1/adapters").json()["data"]] == ["team-a-agent"]


@pytest.mark.parametrize("key", [None, "sk-unknown-key-00001"])
def test_a_bad_key_is_401_on_every_route(stack, key):
    with http(stack, key) as h:
        for method, path, body in [("POST", "/v1/chat/completions", {"model": stack.base, "messages": TEXT}),
                                   ("POST", "/v1/completions", {"model": stack.base, "prompt": "x"}),
                                   ("GET", "/v1/models", None), ("GET", f"/v1/models/{stack.base}", None),
                                   ("POST", "/v1/episodes", {"model": stack.base}), ("GET", "/v1/leaderboard", None),
                                   ("GET", "/v1/usage", None), ("GET", "/v1/adapters", None),
                                   ("POST", "/v1/adapters/x/promote", {}), ("GET", "/openapi.json", None)]:
            openai_shaped(h.request(method, path, json=body), 401, "invalid_api_key")


def test_publishing_rights_through_the_gateway(stack, team_adapters):
    folder_a, folder_b = stack.assets.extra[2], stack.assets.extra[3]
    denied = cli(stack, TEAM_A, "push", str(folder_a), "team-a-agent", "--force")
    assert denied.exit_code == 2 and "403" in denied.output and "role is 'inference'" in denied.output
    pushed = cli(stack, TEAM_B, "push", str(folder_b), "team-b-agent", "--canary", "30")
    assert pushed.exit_code == 0, pushed.output
    assert "as a canary (30%" in pushed.output
    canary = stack.store.resolve("team-b-agent").canary.version
    reweighted = cli(stack, TEAM_B, "canary", f"team-b-agent@{canary}", "--weight", "60")
    assert reweighted.exit_code == 0 and f"canary {canary} (60%)" in reweighted.output
    stable = stack.store.resolve("team-a-agent").version
    other = cli(stack, TEAM_B, "promote", f"team-a-agent@{stable}")
    assert other.exit_code == 2 and "403" in other.output and "do not cover 'team-a-agent'" in other.output
    assert cli(stack, TEAM_B, "rollback", "team-a-agent").exit_code == 2
    assert cli(stack, TEAM_B, "rm", "team-b-agent").exit_code == 2  # deleting is the admin's
    assert cli(stack, TEAM_B, "promote", "team-b-agent").exit_code == 0  # its own canary
    assert stack.store.resolve("team-b-agent").version == canary
    admin = cli(stack, OPS, "rollback", "team-b-agent")
    assert admin.exit_code == 0 and stack.store.resolve("team-b-agent").version != canary
    listed = cli(stack, TEAM_B, "list", "--json")
    assert [r["name"] for r in json.loads(listed.stdout)] == ["team-b-agent"]


def test_rate_limit_with_the_openai_client(stack):
    """A key of 60 requests a minute (OpenAI's RPM form) sent 75 requests at once through the
    official client: 60 pass, counting down 59..0, the rest are 429 with Retry-After and the limit
    headers, no 5xx. Then the client's own retries (Retry-After honoured) finish a batch of 12 on a
    key of 6 requests per 3 s. (The window's sliding, driven at 5x for three windows, is
    tests/serving/auth/test_key_limits.py's.)"""
    c = client(stack, RPM_KEY)

    def one(_):
        try:
            raw = c.chat.completions.with_raw_response.create(model=stack.base, messages=TEXT, max_tokens=1)
            return raw.http_response.status_code, dict(raw.headers)
        except openai.APIStatusError as exc:
            return exc.status_code, {**dict(exc.response.headers), "_error": exc.body}

    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(75)))
    drive_s = time.monotonic() - t0
    ok = [h for s, h in results if s == 200]
    limited = [h for s, h in results if s == 429]
    assert not [s for s, _ in results if s >= 500] and len(ok) + len(limited) == 75
    assert len(ok) == 60, len(ok)  # the burst ends well within its first request's minute
    assert sorted(int(h["x-ratelimit-remaining-requests"]) for h in ok) == list(range(60))
    assert all(h["x-ratelimit-limit-requests"] == "60" for h in ok + limited)
    for h in limited:
        assert 1 <= int(h["retry-after"]) <= 60 and h["x-ratelimit-remaining-requests"] == "0"
        assert h["_error"]["type"] == "requests" and h["_error"]["code"] == "rate_limit_exceeded"
    # Twice the short key's limit at once: the client's own retries wait out its 429s and finish all.
    attempts: list[int] = []
    retrying = client(stack, SHORT_KEY, max_retries=5,
                      http_client=httpx.Client(event_hooks={"response": [lambda r: attempts.append(r.status_code)]}))
    t1 = time.monotonic()
    with ThreadPoolExecutor(12) as pool:
        done = list(pool.map(lambda _: retrying.chat.completions.create(model=stack.base, messages=TEXT, max_tokens=1),
                             range(12)))
    assert len(done) == 12 and attempts.count(200) == 12 and 429 in attempts
    print(f"\n75 requests in {drive_s:.1f}s: {len(ok)} ok, {len(limited)} 429 (Retry-After "
          f"{min(int(h['retry-after']) for h in limited)}-{max(int(h['retry-after']) for h in limited)}s); "
          f"then 12 with retries: {len(attempts)} attempts ({attempts.count(429)} 429) in {time.monotonic() - t1:.1f}s")


def test_maze_eval_under_a_rate_limited_key(stack, tmp_path):
    """maze-eval's episodes under a limit below the stack's pace: all complete, the 429s are
    retried after Retry-After and reported, none ends an episode. The key's 7 requests per 2 s are
    below the 8 first turns sent at once, so 429s come whatever pace the machine allows."""
    from evaluation import EvalConfig, evaluate

    t0 = time.monotonic()
    result = evaluate(EvalConfig(endpoint=stack.base_url, api_key=EVAL_KEY, adapter="maze-grpo", concurrency=8,
                                 seeds="0-7", db=str(tmp_path / "limited.sqlite")))
    wall = time.monotonic() - t0
    assert result.status == "complete" and result.summary.n == 8 and result.summary.errors == 0
    rr = result.retries
    assert rr.rate_limited > 0 and rr.errored == 0  # the 429s were waited out (Retry-After) and reported
    with http(stack, OPS) as h:
        rows = h.get("/v1/usage", params={"since": "1h", "key": "eval-limited"}).json()["data"]
    refused = sum(r["errors"] for r in rows if r["model"] == "-")
    print(f"\nmaze-eval under 7 req / 2 s: {result.summary.solved}/8 in {wall:.0f}s, {rr.rate_limited} answers "
          f"429 waited out ({rr.waited_s:.0f}s waiting), gateway counted {refused} refused")
    assert refused >= rr.rate_limited  # the gateway's count of its 429s (plus the preflight's, if any)


def test_usage_per_key_and_model(stack, team_adapters):
    own, _ = team_adapters
    a = client(stack, TEAM_A)
    for _ in range(3):
        a.chat.completions.create(model=own, messages=TEXT, max_tokens=2)
    client(stack, TEAM_B).models.list()
    r = CliRunner().invoke(serve_cli, ["usage", "--gateway", stack.base_url, "--api-key", TEAM_A, "--since", "1h",
                                       "--json"])
    assert r.exit_code == 0, r.output
    rows = {(x["key"], x["model"]): x for x in json.loads(r.stdout)["data"]}
    assert {k for k, _ in rows} == {"team-a"}  # a tenant reads its own usage
    row = rows[("team-a", own)]
    assert row["requests"] >= 3 and row["prompt_tokens"] > 0 and 0 < row["completion_tokens"] <= 2 * row["requests"]
    text = CliRunner().invoke(serve_cli, ["usage", "--gateway", stack.base_url, "--api-key", OPS])
    assert text.exit_code == 0 and "team-a\t" + own in text.output and "team-b" in text.output
