"""``maze-serve keys check FILE``, in process: the gateway's own reader and rules offline, one line per
problem naming entry and field and never a value, the migration notice for a key file of an earlier
release, and the same verdict as the gateway's KeyRing on the same files."""

from __future__ import annotations

import json
import logging

import pytest
import yaml
from click.testing import CliRunner

from serving.auth.keys import KeyRing, digest
from serving.cli import main
from serving.config import AuthSpec
from serving.errors import KeysUnavailable
from tests.serving.auth.test_keys import LEAKY_EDITS, Clock, shows_token

A, B = "sk-team-a-0123456789", "sk-team-b-0123456789"
VALID = {"keys": [
    {"name": "team-a", "models": ["maze-tiny"], "secrets": [A]},
    {"name": "team-b", "role": "publisher", "models": ["maze-tiny:team-b-*"], "sha256": [digest(B)],
     "min_secret_length": 20},
    {"name": "gone", "models": ["*"], "secrets": []},
]}
# A key file of a release before `min_secret_length`: a `sha256` entry without it.
EARLIER_RELEASE = {"keys": [VALID["keys"][0], {**VALID["keys"][1], "min_secret_length": None}]}
MIGRATION = ("keys[1] ('team-b'): `sha256` without `min_secret_length`: tokens shorter than 16 characters are refused; "
             "add `min_secret_length: N` to this entry, N the length of the shortest token behind its digests (at "
             "least 16)")


def check(path, *args: str):
    return CliRunner().invoke(main, ["keys", "check", str(path), *args])


def written(tmp_path, content, name: str = "keys.yaml"):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    return path


def test_a_valid_key_file(tmp_path):
    path = written(tmp_path, VALID)
    done = check(path)
    assert done.exit_code == 0, done.output
    assert done.stdout == f"{path}: valid: 2 keys with 2 secrets (1 disabled or without secrets: refused)\n"
    assert done.stderr == ""
    report = json.loads(check(path, "--json").stdout)
    assert report["ok"] is True and report["names"] == ["team-a", "team-b"] and report["problems"] == []


def test_an_earlier_release_key_file_loads_with_the_migration_notice(tmp_path):
    path = written(tmp_path, {"keys": [{k: v for k, v in e.items() if v is not None} for e in EARLIER_RELEASE["keys"]]})
    done = check(path)
    assert done.exit_code == 0, done.output
    assert done.stdout == f"{path}: valid: 2 keys with 2 secrets\n"
    assert done.stderr == f"notice: {path}: {MIGRATION}\n"
    strict = check(path, "--strict")
    assert strict.exit_code == 2 and strict.stderr == f"error: {path}: {MIGRATION}\n"
    assert json.loads(check(path, "--json").stdout)["notices"] == [MIGRATION]
    fixed = {"keys": [EARLIER_RELEASE["keys"][0], {**EARLIER_RELEASE["keys"][1], "min_secret_length": 20}]}
    assert check(written(tmp_path, fixed), "--strict").exit_code == 0


def test_problems_name_the_entry_and_the_field(tmp_path):
    bad = {"keys": [VALID["keys"][0],
                    {"name": "team-b", "role": "root", "models": ["*"], "secrets": [B], "rpm": 3},
                    {"name": "team-c", "models": ["*"], "sha256": [digest(B)], "min_secret_length": 8}]}
    path = written(tmp_path, bad)
    done = check(path)
    assert done.exit_code == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"error: {path}: keys[1] ('team-b').role: Input should be 'inference', 'publisher' or 'admin'",
        f"error: {path}: keys[1] ('team-b').<unknown field>: Extra inputs are not permitted",
        f"error: {path}: keys[2] ('team-c'): Value error, min_secret_length must be at least 16: a shorter token "
        "can be guessed",
        f"{path}: the gateway would refuse this key file (a replica that loaded an earlier one keeps its keys for "
        "auth.keys_grace_s, then answers 503)"]
    report = json.loads(check(path, "--json").stdout)
    assert report["ok"] is False and report["reason"] == "invalid" and len(report["problems"]) == 3


@pytest.mark.parametrize(("content", "says"), [
    (f"keys:\n  - name: team-a\n    models: ['*']\n    secrets: [{A}]\n# \xff\n".encode("latin-1"),
     "is not UTF-8 text (an undecodable byte on line 5, byte 79)"),
    ("keys: [{name: broken", "not valid YAML at line 1, column 21"),
    ("", "is empty (no `keys:`)"),
    ("keys: " + "[" * 1000, "not a valid key file: the parser failed (RecursionError)"),
], ids=["not-utf8", "yaml", "empty", "parser-crash"])
def test_unreadable_key_files(tmp_path, content, says):
    done = check(written(tmp_path, content))
    assert done.exit_code == 2 and says in done.stderr and "Traceback" not in done.output, done.output


def test_a_directory_or_nothing_in_the_files_place(tmp_path):
    missing = check(tmp_path / "nope.yaml")
    assert missing.exit_code == 2 and "cannot be read (No such file or directory)" in missing.stderr
    folder = check(tmp_path)
    assert folder.exit_code == 2 and "is a directory, not a regular file" in folder.stderr


@pytest.mark.parametrize("edit", LEAKY_EDITS)
def test_the_check_shows_no_secret(tmp_path, edit):
    path = written(tmp_path, edit)
    done = check(path)
    assert done.exit_code == 2 and done.stderr.startswith(f"error: {path}: "), done.output
    assert not shows_token(done.output), done.output
    report = json.loads(check(path, "--json").stdout)
    assert report["problems"] and not shows_token(json.dumps(report))


@pytest.mark.parametrize("content", [VALID, EARLIER_RELEASE, *LEAKY_EDITS, b"keys: []\n\xfe", "keys: []"])
def test_the_check_and_the_gateway_agree(tmp_path, caplog, content):
    """What the check passes, a KeyRing loads; what it fails, the ring refuses, logging each problem."""
    if isinstance(content, dict):
        content = yaml.safe_dump({"keys": [{k: v for k, v in e.items() if v is not None} for e in content["keys"]]})
    path = written(tmp_path, content)
    report = json.loads(check(path, "--json").stdout)
    caplog.set_level(logging.WARNING, logger="serving.auth.keys")
    ring = KeyRing(AuthSpec(keys_file=str(path)), clock=Clock())
    try:
        ring.lookup("sk-nobody-0123456789")
        loaded = True
    except KeysUnavailable:
        loaded = False
    assert loaded == report["ok"]
    assert all(p in caplog.text for p in report["problems"] + report["notices"]), caplog.text
