"""The SkyRL key list: how it is extracted, and that it matches the pinned skyrl wheel (fetched by
`make setup-test` into .cache/wheels/, or named by SKYRL_WHEEL)."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from pathlib import Path
from typing import Optional

from training.skyrl.keys import _KEYS_FILE, SKYRL_VERSION, is_known_key

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("extract_skyrl_keys", ROOT / "scripts" / "extract_skyrl_keys.py")
extract = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(extract)


@dataclasses.dataclass
class _Lora:
    rank: int = 0


@dataclasses.dataclass
class _Model:
    path: Optional[str] = None  # noqa: UP045 (SkyRL's spelling)
    lora: _Lora = dataclasses.field(default_factory=_Lora)
    kwargs: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _Root:
    model: Optional[_Model] = None  # noqa: UP045


def test_walk_flattens_nested_dataclasses():
    assert extract.walk(_Root) == [
        ("model.path", "Optional[str]"), ("model.lora.rank", "int"), ("model.kwargs", "dict")
    ]
    keys = dict(extract.walk(_Root))
    assert is_known_key("model.kwargs.anything.deep", keys) and not is_known_key("model.lora.alpha", keys)


def skyrl_wheel() -> Path:
    """``SKYRL_WHEEL`` when set, else the wheel scripts/fetch_skyrl_wheel.sh (run by setup) leaves."""
    given = os.environ.get("SKYRL_WHEEL")
    return Path(given) if given else ROOT / ".cache" / "wheels" / f"skyrl-{SKYRL_VERSION}-py3-none-any.whl"


def test_key_file_matches_the_wheel(tmp_path):
    wheel = skyrl_wheel()
    assert wheel.is_file(), (f"no skyrl {SKYRL_VERSION} wheel at {wheel}: `make setup-test` fetches it "
                             "(scripts/fetch_skyrl_wheel.sh), or set SKYRL_WHEEL")
    out = tmp_path / "keys.txt"
    extract.main([str(wheel), "--out", str(out)])
    assert out.read_text() == _KEYS_FILE.read_text()
