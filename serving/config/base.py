"""The base of every serving config section: unknown keys are errors, so a misspelt field fails
loudly at load instead of silently keeping its default."""

from __future__ import annotations

import re
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

#: A name (of a key, a model, an adapter): 1-128 letters, digits, '.', '_' or '-', not starting with a symbol.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class SectionModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PerNamePolicies(SectionModel):
    """A policy section kept as a default for every adapter name and per-name changes to it
    (``adapters.gate``, ``adapters.guard``): a subclass declares ``default`` (its policy model) and
    ``names`` (adapter name -> the fields of ``default`` it changes); each name's policy is checked
    at load, so a bad change fails there, naming the name and the field."""

    section: ClassVar[str] = ""

    @field_validator("names", check_fields=False)
    @classmethod
    def _names(cls, v: dict[str, dict]) -> dict[str, dict]:
        for name in v:
            if not NAME.match(name):
                raise ValueError(f"{cls.section}.names: {name!r} is not an adapter name")
        return v

    @model_validator(mode="after")
    def _each_name_valid(self) -> PerNamePolicies:
        for name in self.names:
            try:
                self.policy(name)
            except ValidationError as exc:
                why = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'policy'}: {e['msg']}" for e in exc.errors())
                raise ValueError(f"{self.section}.names.{name}: {why}") from None
        return self

    def policy(self, name: str) -> Any:
        """``name``'s policy: the default with the name's changes."""
        if name not in self.names:
            return self.default
        return type(self.default).model_validate({**self.default.model_dump(), **self.names[name]})


__all__ = ["NAME", "PerNamePolicies", "SectionModel"]
