"""`make test`'s last lines (scripts/test_recap.py) from a real pytest run's JUnit file: counts, and
every failure and error named with its message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = '''
import pytest

def test_passes():
    pass

def test_fails():
    assert 1 == 2, "one is not two"

@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")

def test_errors(broken):
    pass

@pytest.mark.skip(reason="not here")
def test_skipped():
    pass
'''


def test_the_recap_names_each_failure_after_the_counts(tmp_path):
    (tmp_path / "test_cases.py").write_text(CASES)
    report = tmp_path / "report.xml"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
                          "test_cases.py"], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert run.returncode == 1, run.stdout
    recap = subprocess.run([sys.executable, str(ROOT / "scripts" / "test_recap.py"), f"main={report}",
                            f"gpu-lock={tmp_path / 'missing.xml'}"], capture_output=True, text=True, check=True)
    lines = recap.stdout.strip().splitlines()
    assert lines[1] == "main: 1 passed, 2 failed, 1 skipped"  # the error counts as failed
    assert lines[2].startswith("  FAILED test_cases.py::test_fails: ") and "one is not two" in lines[2]
    assert lines[3].startswith("  ERROR test_cases.py::test_errors: ") and "fixture broke" in lines[3]
    assert lines[4].startswith("gpu-lock: no report") and "missing.xml" in lines[4]
