"""No existence oracle on the real embedded gateway (the `stack` fixture: auth on, the tenants' keys of
tests/support/gateway_stack.py, where team-a sees ``maze-tiny`` and ``maze-tiny:team-a-*``).

A key pages through exactly the models it may call, with a name outside its scope sorting first;
``has_more`` and ``after`` tell it nothing about the names it cannot see; bad input on the management
and engine routes is a 4xx in OpenAI's shape with a request id; ``/ready`` says only ready without an
admin key; Ray's own ``/-/routes`` and ``/-/healthz`` are answered by Ray before the app (no key
possible there: docs/serving.md, "What a key can see") and name nothing but the app.
The same, in detail, over ASGI: tests/serving/ingress/test_no_oracle.py."""

from __future__ import annotations

import fnmatch

import httpx
import pytest

from tests.support.gateway_stack import OPS, TEAM_A, TEAM_B

pytestmark = pytest.mark.slow
TEXT = [{"role": "user", "content": "You are in a maze. Move?"}]


def http(stack, key: str | None) -> httpx.Client:
    return httpx.Client(base_url=stack.root, headers={"Authorization": f"Bearer {key}"} if key else {}, timeout=120)


@pytest.fixture(scope="module")
def published(stack):
    """An out-of-scope name sorting before every other and one of team-a's; the names team-a may
    see, in the listing's order (the store's key order), whatever other tests published."""
    stack.push(stack.assets.extra[5], "aaa-other", force=True)
    stack.push(stack.assets.extra[6], "team-a-x", force=True)
    return own_names(stack)


def own_names(stack) -> list[str]:
    names, _ = stack.store.page_names(None, None)
    return [f"{stack.base}:{n}" for n in names if fnmatch.fnmatchcase(n, "team-a-*")]


def pages(stack, limit: int, after: str | None = None) -> list[dict]:
    """Every page team-a gets from ``after`` on, following ``after`` = the last id of each page."""
    out = []
    with http(stack, TEAM_A) as h:
        while True:
            params = {"limit": limit, **({"after": after} if after else {})}
            page = h.get("/v1/models", params=params)
            assert page.status_code == 200, page.text
            out.append(page.json())
            if not page.json()["has_more"]:
                return out
            after = page.json()["data"][-1]["id"]


def test_a_key_pages_through_exactly_its_models(stack, published):
    assert "maze-tiny:team-a-x" in published and stack.store.page_names(None, 1)[0] == ["aaa-other"]
    got = pages(stack, limit=1)
    ids = [m["id"] for page in got for m in page["data"]]
    assert ids == [stack.base, *published]  # the base on the first page, then one of its own per page
    assert [p["has_more"] for p in got] == [True] * (len(got) - 1) + [False]
    assert len(got) == len(published)  # no page is empty: has_more never counts a name it cannot see
    whole = pages(stack, limit=1000)
    assert [m["id"] for m in whole[0]["data"]] == [stack.base, *published] and len(whole) == 1


def test_has_more_and_after_reveal_nothing_outside_the_scope(stack, published):
    def answers() -> list[list[dict]]:
        # aaa-other exists and is not team-a's; the others do not exist and sort in the same place.
        return [pages(stack, limit, after) for after in ("aaa-other", "aaa-other0", "aab", f"{stack.base}:aaa-other")
                for limit in (1, 2, 1000)]

    before = answers()
    for i in range(3):  # per limit, every `after` gets the same pages
        assert all(a == before[i] for a in before[i::3]), before[i::3]
    stack.push(stack.assets.extra[7], "aab-other", force=True)  # another name team-a cannot see
    assert answers() == before and own_names(stack) == published


def test_bad_input_is_never_a_5xx(stack, published):
    tar = b"not a tar at all"
    cases = [
        (OPS, "POST", "/v1/adapters/beta-nl%0A/versions", {"content": tar}),
        (TEAM_B, "POST", "/v1/adapters/team-b-nl%0A/versions", {"content": tar}),
        (TEAM_B, "POST", "/v1/adapters/team-b-x/versions", {"content": tar}),
        (OPS, "GET", "/v1/adapters/team-a-x%0A/history", {}),
        (OPS, "GET", "/v1/adapters/team-a-x/verify", {"params": {"version": "0123456789ab\n"}}),
        (OPS, "GET", f"/v1/models/{stack.base}:team-a-x%0A", {}),
        (TEAM_A, "GET", "/v1/models", {"params": {"after": "team-a-x\n", "limit": 1}}),
        (TEAM_A, "GET", "/v1/models", {"params": {"limit": "all"}}),
        (OPS, "POST", "/v1/adapters/team-a-x/canary", {"content": b"{", "headers": {"content-type": "application/json"}}),
        (OPS, "POST", "/v1/adapters/team-a-x/canary", {"json": {"version": 1, "weight": "heavy"}}),
        (OPS, "POST", "/v1/adapters/team-a-x/promote", {"json": {"version": ["x"], "force_parity": "very"}}),
        (TEAM_A, "POST", "/v1/chat/completions", {"content": b"{", "headers": {"content-type": "application/json"}}),
        (TEAM_A, "POST", "/v1/chat/completions", {"json": {"model": 5, "messages": "x"}}),
        (TEAM_A, "POST", "/v1/chat/completions", {"json": {"model": f"{stack.base}:team-a-x\n", "messages": TEXT}}),
        (TEAM_A, "POST", "/v1/chat/completions", {"json": {"model": f"{stack.base}:team-a-x@latest", "messages": TEXT}}),
        (TEAM_A, "POST", "/v1/completions", {"json": {"model": f"{stack.base}:a/b", "prompt": "x", "max_tokens": 1}}),
    ]
    for key, method, path, kwargs in cases:
        with http(stack, key) as h:
            r = h.request(method, path, **kwargs)
        assert 400 <= r.status_code < 500, (path, kwargs, r.status_code, r.text)
        err = r.json()["error"]
        assert set(err) == {"message", "type", "code"} and err["message"], (path, r.text)
        assert r.headers.get("x-request-id") and "s3://" not in r.text, (path, r.headers, r.text)


def test_probes_say_only_ready_without_an_admin_key(stack):
    for key in (None, TEAM_A, "sk-unknown-key-00001"):
        with http(stack, key) as h:
            r = h.get("/ready")
        assert r.status_code == 200 and r.json() == {"status": "ready"}, (key, r.text)
    with http(stack, OPS) as h:
        assert h.get("/ready").json() == {"status": "ready", "models": {stack.base: "ok"}}
    # Ray's own routes are answered by Ray's server before the app runs: no key can be asked for
    # there, and they name nothing but the application (the operator keeps /-/ off the load balancer).
    routes = httpx.get(f"{stack.root}/-/routes", timeout=30)
    assert routes.status_code == 200 and set(routes.json().values()) == {stack.cfg.name}, routes.text
    healthz = httpx.get(f"{stack.root}/-/healthz", timeout=30)
    assert healthz.status_code == 200 and healthz.text == "success", healthz.text
