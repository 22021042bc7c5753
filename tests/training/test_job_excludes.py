"""training.jobs.git_ignored: what git leaves out of a job's working_dir, as Ray's excludes read it."""

from __future__ import annotations

import subprocess

from ray._private.thirdparty.pathspec import PathSpec  # the matcher Ray's packaging applies to excludes

from training.jobs import WORKING_DIR_EXCLUDES, git_ignored


def excluded(patterns: list[str], path: str) -> bool:
    return PathSpec.from_lines("gitwildmatch", patterns).match_file(path)


def test_every_ignore_source_of_git_is_excluded_and_nothing_else(tmp_path):
    repo = tmp_path / "repo"
    for rel in ("ckpt/step_1/model.bin", "data[1]/rows.jsonl", "notes.tmp", "src/train.py", "src/data/rows.jsonl"):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text("x")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text("*.tmp\n")
    (repo / ".git" / "info" / "exclude").write_text("/ckpt/\n/data[[]1]/\n")
    patterns = [*WORKING_DIR_EXCLUDES, *git_ignored(repo)]
    assert excluded(patterns, "ckpt/step_1/model.bin") and excluded(patterns, "data[1]/rows.jsonl")
    assert excluded(patterns, "notes.tmp")
    # anchored and escaped: a folder of the same name deeper down, and a name with brackets, stay in
    assert not excluded(patterns, "src/train.py") and not excluded(patterns, "src/data/rows.jsonl")
    assert not excluded(patterns, "data1/rows.jsonl")


def test_outside_a_git_work_tree_nothing_is_added(tmp_path):
    assert git_ignored(tmp_path) == []
    assert git_ignored(tmp_path / "missing") == []
