"""Revoking keys on the real embedded gateway (the `stack` fixture: the tenants' key file of
tests/support/gateway_stack.py, re-read every `auth.reload_s`, 2 s): a secret taken out of its entry,
a key's last secret removed or the key disabled, is refused within reload_s + 2 s while the file's
other keys keep working; bad edits keep the last keys (within `auth.keys_grace_s`) and put no run of
8 characters of any secret in the file into any log of the stack; the file restored, the keys work."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import httpx
import pytest
import yaml

from serving.auth.keys import digest
from serving.local import embedded
from tests.support.gateway_stack import OPS, TEAM_A, TEAM_B, TENANTS, write_tenant_keys
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

# Fresh per run, so a hit in the logs can only come from this run's edits; no hex digit and no word
# (Ray's logs are full of hex ids and of words like "rotate"), so a hit is a leak, not a coincidence.
_ALPHABET = "ghijkmnpqrstuvwxyzGHJKLMNPQRSTUVWXYZ"
OLD, NEW, DIGESTED = ("sk-" + "".join(secrets.choice(_ALPHABET) for _ in range(28)) for _ in range(3))
RUN = 8  # the shortest run of a secret's characters no log may hold
# Keys without limits: the limited tenants' windows belong to test_tenants.py's bursts.
UNLIMITED = (TEAM_A, TEAM_B, OPS)


def entries(rotating: list[str], digest_disabled: bool = False) -> list[dict]:
    """The run's keys beside the tenants': one rotating its secrets, one known by its digest."""
    return [{"name": "rotating", "role": "inference", "models": ["maze-tiny"], "secrets": rotating},
            {"name": "digested", "role": "inference", "models": ["maze-tiny"], "sha256": [digest(DIGESTED)],
             "min_secret_length": len(DIGESTED), "disabled": digest_disabled}]


def status(stack, key: str) -> int:
    with httpx.Client(base_url=stack.root, headers={"Authorization": f"Bearer {key}"}, timeout=30) as h:
        return h.get("/v1/models").status_code


def wait_status(stack, key: str, expected: int, within_s: float) -> float:
    """Seconds from the call to the first request answered ``expected`` (polled). Failing when a
    request sent ``within_s`` or later is still answered otherwise: the bound is on when the request
    reached the gateway, not on when its answer was read (a loaded machine can hold an answer given
    in time until after the bound)."""
    t0 = time.monotonic()
    while True:
        sent = time.monotonic() - t0
        if (got := status(stack, key)) == expected:
            return sent
        assert sent < within_s, f"still {got}, not {expected}, to a request sent {sent:.1f}s in (bound {within_s:.0f}s)"
        time.sleep(0.1)


def file_secrets() -> list[str]:
    return [s for k in TENANTS["keys"] for s in k["secrets"]] + [OLD, NEW, DIGESTED]


def logs_showing_secrets(logs: Path) -> list[tuple[str, bytes]]:
    """(log file, the text around it) for every run of RUN characters of a secret in a log of the stack."""
    runs = {s[i:i + RUN].encode() for s in file_secrets() for i in range(len(s) - RUN + 1)}
    hits = []
    for f in (p for p in logs.rglob("*") if p.is_file()):
        data = f.read_bytes()
        hits += [(str(f), data[max(0, at - 80):at + 80]) for run in runs if (at := data.find(run)) >= 0]
    return hits


@pytest.fixture
def key_file(stack):
    """The stack's key file, restored to the tenants' keys at the end (other tests share it)."""
    path = Path(stack.cfg.auth.keys_file)
    try:
        yield path
    finally:
        write_tenant_keys(path)
        wait_status(stack, TEAM_A, 200, 3 * stack.cfg.auth.reload_s + 5)


def test_revoked_secrets_are_refused_and_bad_edits_log_no_secret(stack, key_file):
    reload_s = stack.cfg.auth.reload_s
    assert stack.cfg.auth.keys_grace_s > 60  # the bad edits below stay within the grace
    write_tenant_keys(key_file, entries([OLD, NEW]))
    for key in (OLD, NEW, DIGESTED):
        wait_status(stack, key, 200, reload_s + 5)

    steps = [(entries([NEW]), OLD),  # rotation done: the old secret retired
             (entries([]), NEW),  # the key's last secret removed: the key revoked, the file still valid
             (entries([], digest_disabled=True), DIGESTED)]  # a key disabled
    for extra, revoked in steps:
        write_tenant_keys(key_file, extra)
        took = wait_status(stack, revoked, 401, reload_s + 2)
        print(f"revoked within {took:.1f}s")
        assert all(status(stack, k) == 200 for k in UNLIMITED)

    good = key_file.read_text()
    bad_edits = [
        good.replace(f"- {TEAM_A}", f"- [{TEAM_A}", 1),  # a YAML syntax error right after a secret
        yaml.safe_dump({"keys": [{**k, "secrets": k["secrets"][0]} for k in TENANTS["keys"]]}),  # a wrong type
        yaml.safe_dump({"keys": [{**k, "secrets": [], "sha256": k["secrets"], "min_secret_length": 16}
                                 for k in TENANTS["keys"]]}),  # secrets pasted where digests go
        good.encode() + b"# \xff\n",  # a byte that is not UTF-8: a failed read like the others, never a 500
    ]
    assert len({*bad_edits, good}) == 5
    for text in bad_edits:
        key_file.write_bytes(text if isinstance(text, bytes) else text.encode())
        written = time.monotonic()
        # The last keys kept (the grace), checked until a request sent reload_s + 1.5 s after the edit
        # has been answered: the gateway re-reads the file at a key lookup once reload_s has passed
        # since its last read, so that request's lookup followed a read of this edit (a time-boxed loop
        # could end with no request after reload_s when this process is kept off the cores).
        while True:
            sent = time.monotonic()
            assert status(stack, TEAM_A) == 200 and status(stack, NEW) == 401
            if sent >= written + reload_s + 1.5:
                break
            time.sleep(0.2)

    logs = Path(embedded.read_state().ray_temp_dir) / "session_latest" / "logs"
    wanted = (b"not valid YAML at line", b"not a valid key file: keys[0]",
              b"is not UTF-8 text (an undecodable byte on line")

    def logged() -> bytes:
        return b"".join(data for p in logs.rglob("*") if p.is_file()
                        and b"API keys: auth.keys_file" in (data := p.read_bytes()))

    def all_logged() -> bool:
        text = logged()
        return all(w in text for w in wanted)

    wait_for(all_logged, timeout=30, interval=1.0)  # the replica's lines reach their files on its logger's schedule
    text = logged()
    assert text, "the bad edits were not logged"
    assert all(w in text for w in wanted), [w for w in wanted if w not in text]
    assert logs_showing_secrets(logs) == []

    write_tenant_keys(key_file, entries([NEW]))  # fixed: read again, with its revocations
    wait_status(stack, NEW, 200, reload_s + 2)
    assert all(status(stack, k) == 200 for k in UNLIMITED)
    assert status(stack, OLD) == 401 and status(stack, DIGESTED) == 200
