"""The HTML report renders in a real headless Chromium: non-empty screenshot, no console errors."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from evaluation import EvalConfig, Store, evaluate
from evaluation.report import write_report

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--enable-logging=stderr", "--v=0", "--window-size=1280,1800",
]


def render(page: Path, tmp_path: Path) -> tuple[np.ndarray, list[str]]:
    """Screenshot ``page`` and return (pixels, console messages)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.fail("chromium not installed; `make setup-test` installs Debian's chromium")
    shot = tmp_path / f"{page.stem}.png"
    proc = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / ('profile-' + page.stem)}", f"--screenshot={shot}",
         page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    assert shot.exists(), proc.stderr[-2000:]
    return np.asarray(Image.open(shot).convert("RGB")), console


def test_report_renders_without_console_errors(scripted, tmp_path):
    result = evaluate(EvalConfig(endpoint=scripted.url, db=str(tmp_path / "db.sqlite"), adapter="noisy", seeds="0-15"))
    page = write_report(Store(str(tmp_path / "db.sqlite")), result.run_id, tmp_path / "report.html")
    pixels, console = render(page, tmp_path)
    assert console == []
    assert pixels.shape[0] > 500 and pixels.std() > 20  # real content, not a blank page
    # The outcome grid draws green (solved) borders: the report is not just text.
    assert ((pixels[..., 0] == 0x2E) & (pixels[..., 1] == 0x7D) & (pixels[..., 2] == 0x32)).sum() > 1000

    # The check itself can fail: a page with a script error is caught.
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><p>x</p><script>missingFunction()</script></body></html>")
    assert any("missingFunction" in line for line in render(bad, tmp_path)[1])
