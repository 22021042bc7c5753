"""The lab reads a model folder's profile through agent's parser, keeping the folder's other keys."""

from __future__ import annotations

import json

import pytest

from training.tiny.data import read_profile, write_profile
from training.tiny.data.demos import DEFAULT_HISTORY, DEFAULT_PROTOCOL


def test_written_profile_reads_back_with_its_env(tmp_path):
    write_profile(tmp_path, protocol="keyword", history="window:3")
    assert read_profile(tmp_path) == {"protocol": "keyword", "history": "window:3", "env_id": "maze_2d/simple",
                                      "max_turns": 15}


def test_a_folder_without_a_profile_gets_the_labs_default(tmp_path):
    assert read_profile(tmp_path) == {"protocol": DEFAULT_PROTOCOL, "history": DEFAULT_HISTORY}


def test_the_parser_normalizes_and_refuses(tmp_path):
    (tmp_path / "agent_profile.json").write_text(json.dumps({"protocol": "tuple", "history": "last:2"}))
    assert read_profile(tmp_path)["history"] == "window:2"  # the alias, as every other reader sees it
    (tmp_path / "agent_profile.json").write_text(json.dumps({"protocol": "tuple", "history": "sometimes"}))
    with pytest.raises(ValueError, match="history policy"):
        read_profile(tmp_path)
