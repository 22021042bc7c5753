"""Trainer configs from a YAML/JSON file with command-line flags on top (one rule for every trainer)."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


def load_with_overrides(model: type[M], flags: dict) -> M:
    """``flags`` as parsed (None = not given); its ``config`` entry names the file, the rest override it."""
    given = {k: v for k, v in flags.items() if v is not None}
    path = given.pop("config", None)
    base = (yaml.safe_load(Path(path).read_text()) or {}) if path else {}
    return model.model_validate(base | given)
