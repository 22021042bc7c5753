"""The last lines `make test` prints: each pytest run's counts and the tests that failed, read from
the runs' JUnit files.

`make test` runs pytest twice (the main suite, then the GPU lock's engine-seam tests); each run's own
summary scrolls away under the next run's output, and a CI that keeps only the tail of the log
would show the second run passing while the first failed. This recap names every failure last.

    python scripts/test_recap.py NAME=REPORT.xml [NAME=REPORT.xml ...]
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def recap(name: str, report: Path) -> list[str]:
    """One line of counts for the run, then one line per failed or erroring test."""
    if not report.is_file():
        return [f"{name}: no report ({report}): the run stopped before pytest wrote it"]
    root = ET.parse(report).getroot()
    counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    failures = []
    for case in root.iter("testcase"):
        outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
        counts["failed" if outcome == "failure" else outcome] += 1
        if outcome in ("failure", "error"):
            message = (case.find(outcome).get("message") or "").splitlines()
            test_name = case.get("name", "").rsplit("@", 1)[0]  # xdist's --dist loadgroup appends @GROUP
            test = f"{case.get('classname', '').replace('.', '/')}.py::{test_name}"
            kind = "FAILED" if outcome == "failure" else "ERROR"
            failures.append(f"  {kind} {test}: {message[0][:200] if message else ''}")
    # The plain closing line CI readers take from any runner: "N passed, N failed[, N skipped]"; a
    # test that errored (in a fixture, say) counts as failed, and its own line below says ERROR.
    line = f"{counts['passed']} passed, {counts['failed'] + counts['error']} failed"
    if counts["skipped"]:
        line += f", {counts['skipped']} skipped"
    return [f"{name}: {line}", *failures]


def main(argv: list[str]) -> int:
    lines = ["", "== make test: every run =="]
    for arg in argv:
        name, _, path = arg.partition("=")
        lines += recap(name, Path(path))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
