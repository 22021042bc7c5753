"""scripts/install_serving_gpu.sh's venv on an image whose python3 is itself a virtual environment
(the GPU machine's is ``/opt/torch/.venv``): the image's packages must be importable in the venv it
makes, which ``--system-site-packages`` alone does not give."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install_serving_gpu.sh"


def image_site_snippet() -> str:
    """The script's Python that adds the image's site-packages to the venv (its heredoc)."""
    text = SCRIPT.read_text()
    m = re.search(r'"\$PYTHON" - "\$venv" <<\'EOF\'\n(.*?)\nEOF\n', text, re.S)
    assert m, "the install script no longer adds the image's packages to its venv"
    return m.group(1)


def test_a_venv_made_from_a_venv_python_sees_the_images_packages(tmp_path):
    assert sys.prefix != sys.base_prefix  # the test runs in the project's venv: an image like the GPU machine's
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    # ray: installed in the project's venv only, not in the Python it was made from
    probe = [str(venv / "bin" / "python"), "-c", "import importlib.util as u; print(u.find_spec('ray').origin)"]
    assert subprocess.run(probe, capture_output=True).returncode != 0  # what the GPU install met (yaml missing there)
    subprocess.run([sys.executable, "-", str(venv)], input=image_site_snippet(), text=True, check=True)
    out = subprocess.run(probe, capture_output=True, text=True, check=True).stdout
    assert out.startswith(sys.prefix)  # the image's own copy
    path = subprocess.run([str(venv / "bin" / "python"), "-c", "import sys; print(sys.path)"],
                          capture_output=True, text=True, check=True).stdout
    own = str(venv / "lib")
    assert path.index(own) < path.index(sys.prefix + "/lib")  # the venv's own wheels come first
