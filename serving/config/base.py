"""The base of every serving config section: unknown keys are errors, so a misspelt field fails
loudly at load instead of silently keeping its default."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

#: A name (of a key, a model, an adapter): 1-128 letters, digits, '.', '_' or '-', not starting with a symbol.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class SectionModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


__all__ = ["NAME", "SectionModel"]
