"""Key sources fail closed on every kind of bad read: bytes that are not UTF-8, a directory or a FIFO in
the file's place, a file that changes while it is read, a parser that fails, and arbitrary bytes
(Hypothesis). Each failed read is counted and logged without a secret, the source's last keys are
kept for ``auth.keys_grace_s``, then its tokens are answered 503; nothing else escapes a lookup.
On real files, with the ring's clock stepped by hand (no Ray, no engine)."""

from __future__ import annotations

import logging
import os

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serving.auth import key_file
from serving.auth.key_file import READ_ATTEMPTS, KeySourceError, read_key_file
from serving.auth.keys import KeyRing, load_key_file
from serving.config import AuthSpec
from serving.errors import KeysUnavailable
from tests.serving.auth.test_keys import Clock, Counted

A, B = "sk-team-a-0123456789", "sk-team-b-0123456789"
BOTH = {"keys": [{"name": "a", "models": ["*"], "secrets": [A]}, {"name": "b", "models": ["*"], "secrets": [B]}]}
WITHOUT_B = yaml.safe_dump({"keys": BOTH["keys"][:1]}).encode()
# The bad edit: key `b` removed, and a byte that is not UTF-8 left in a comment.
BAD_EDIT = WITHOUT_B + b"# rotated by ops \xff\n"


@pytest.fixture
def counted(monkeypatch) -> Counted:
    counter = Counted()
    monkeypatch.setattr("serving.auth.keys.metric", counter)
    return counter


def loaded_ring(path, *, reload_s: float = 1, grace_s: float = 5) -> tuple[KeyRing, Clock]:
    path.write_text(yaml.safe_dump(BOTH))
    clock = Clock()
    ring = KeyRing(AuthSpec(keys_file=str(path), reload_s=reload_s, keys_grace_s=grace_s), clock=clock)
    assert ring.lookup(A).name == "a" and ring.lookup(B).name == "b"
    return ring, clock


def answer(ring: KeyRing, token: str) -> str:
    """What the gate makes of a lookup: the key's name, 401 or 503; any other exception fails the test."""
    try:
        principal = ring.lookup(token)
    except KeysUnavailable:
        return "503"
    return principal.name if principal is not None else "401"


def test_a_removed_key_in_an_edit_that_is_not_utf8_is_refused_once_the_grace_ends(tmp_path, counted, caplog):
    path = tmp_path / "keys.yaml"
    ring, clock = loaded_ring(path, reload_s=1, grace_s=5)
    start = clock.t
    path.write_bytes(BAD_EDIT)
    caplog.set_level(logging.WARNING, logger="serving.auth.keys")
    clock.t = start + 2  # the first failed read: the grace starts, the last keys answer
    assert answer(ring, B) == "b" and answer(ring, A) == "a"
    assert counted.reasons == ["encoding"]
    line = WITHOUT_B.count(b"\n") + 1
    assert f"is not UTF-8 text (an undecodable byte on line {line}, byte {len(WITHOUT_B) + 17})" in caplog.text
    assert "its last 2 secrets are kept 5s more" in caplog.text
    clock.t = start + 6.9
    assert answer(ring, B) == "b"
    for t in (7, 10, 100, 1000):  # 5 s after the first failed read, and ever after: refused, never a 500
        clock.t = start + t
        assert answer(ring, B) == "503" and answer(ring, A) == "503", t
    assert counted.reasons == ["encoding"] * 6  # each read counted: at 2, 6.9, 7, 10, 100 and 1000 s
    assert "past auth.keys_grace_s" in caplog.text
    path.write_bytes(WITHOUT_B)  # the edit mended: `a` answers, `b` stays removed
    clock.t += 1
    assert answer(ring, A) == "a" and answer(ring, B) == "401"


def changing_reads(monkeypatch, path, changes: int) -> list[int]:
    """Rewrite ``path`` just after each of its first ``changes`` reads (a writer that rewrites the
    file in place while the gateway reads it); the reads' sizes are returned."""
    reads, real = [], key_file._read_all

    def read_all(fd: int) -> bytes:
        data = real(fd)
        reads.append(len(data))
        if len(reads) <= changes:
            with open(path, "ab") as f:
                f.write(b"# more\n")
        return data

    monkeypatch.setattr(key_file, "_read_all", read_all)
    return reads


def test_a_file_that_changes_while_it_is_read_is_read_again_then_fails(tmp_path, monkeypatch):
    path = tmp_path / "keys.yaml"
    path.write_bytes(WITHOUT_B)
    reads = changing_reads(monkeypatch, path, changes=1)
    assert read_key_file(path) == WITHOUT_B.decode() + "# more\n"  # the second read is whole
    assert len(reads) == 2
    path.write_bytes(WITHOUT_B)
    reads = changing_reads(monkeypatch, path, changes=READ_ATTEMPTS)
    with pytest.raises(KeySourceError, match="changed while it was read, 3 times in a row") as info:
        read_key_file(path)
    assert info.value.reason == "changed" and len(reads) == READ_ATTEMPTS


def _replace_with_dir(path) -> None:
    path.unlink()
    path.mkdir()


def _replace_with_fifo(path) -> None:
    path.unlink()
    os.mkfifo(path)  # opened for reading, a FIFO with no writer would block the request for ever


@pytest.mark.parametrize(("edit", "reason", "says"), [
    (lambda p: p.write_bytes(BAD_EDIT), "encoding", "is not UTF-8 text"),
    (_replace_with_dir, "unreadable", "is a directory, not a regular file"),
    (_replace_with_fifo, "unreadable", "is a FIFO, not a regular file"),
    (lambda p: p.write_text("keys: " + "[" * 1000), "invalid", "the parser failed (RecursionError)"),
    (lambda p: p.chmod(0), "unreadable", "cannot be read (Permission denied)"),
], ids=["not-utf8", "directory", "fifo", "parser-crash", "no-permission"])
def test_every_bad_read_fails_closed(tmp_path, counted, caplog, edit, reason, says):
    if reason == "unreadable" and "Permission" in says and os.geteuid() == 0:
        pytest.skip("root reads a file without permissions")
    path = tmp_path / "keys.yaml"
    ring, clock = loaded_ring(path, reload_s=1, grace_s=5)
    start = clock.t
    edit(path)
    caplog.set_level(logging.ERROR, logger="serving.auth.keys")
    clock.t = start + 1
    assert answer(ring, B) == "b"  # within the grace
    assert counted.reasons == [reason] and says in caplog.text, caplog.text
    clock.t = start + 6
    assert answer(ring, B) == "503" and answer(ring, A) == "503"
    with pytest.raises(KeySourceError) as info:
        load_key_file(read_key_file(path))
    assert info.value.reason == reason and info.value.__cause__ is None and info.value.__context__ is None


def test_a_secret_no_request_can_send_loads_and_matches_nothing():
    # A lone surrogate (a YAML escape) hashes like any string instead of failing the whole file.
    keys = load_key_file('keys: [{name: x, models: ["*"], secrets: ["\\ud800-0123456789abcdef"]}]').keys
    assert [p.name for p in keys.values()] == ["x"]


# -- arbitrary bytes -----------------------------------------------------------------------------------

VALID = yaml.safe_dump(BOTH).encode()


@st.composite
def bad_edits(draw) -> bytes:
    """Bytes for the key file: arbitrary, or the file without `b` with bytes inserted, replaced or
    cut (a bad edit of a real file: mostly valid YAML around the damage)."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=600))
    data = bytearray(WITHOUT_B)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["insert", "replace", "cut"]))
        junk = draw(st.binary(min_size=1, max_size=8))
        if kind == "insert":
            data[at:at] = junk
        elif kind == "replace":
            data[at:at + len(junk)] = junk
        else:
            del data[at:at + len(junk)]
    return bytes(data)


@settings(max_examples=400, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(edit=bad_edits())
def test_arbitrary_bytes_fail_closed_and_a_removed_key_is_refused_within_the_grace(tmp_path_factory, edit):
    path = tmp_path_factory.mktemp("keys") / "keys.yaml"
    try:
        text = read_key_file_bytes(path, edit)
        load_key_file(text)
    except KeySourceError:
        pass  # the package's own error: anything else escaping fails the test
    ring, clock = loaded_ring(path, reload_s=1, grace_s=5)
    start = clock.t
    path.write_bytes(edit)  # `b` is in no edit: its secret appears nowhere in the bytes
    assert B.encode() not in edit
    clock.t = start + 2
    assert answer(ring, B) in ("b", "401")  # kept within the grace (a read that failed), or gone (one that loaded)
    answer(ring, A)
    clock.t = start + 2 + 5
    assert answer(ring, B) in ("401", "503")
    clock.t = start + 1000
    assert answer(ring, B) in ("401", "503")


def read_key_file_bytes(path, data: bytes) -> str:
    path.write_bytes(data)
    return read_key_file(path)
