"""The model string every route, replica, key and run speaks: ``base``, ``base:name`` or ``base:name@version``.

A client names a base model (``visgym-qwen3vl``), an adapter's alias on it (``visgym-qwen3vl:maze-grpo``,
whatever version the name serves now) or one version of it (``visgym-qwen3vl:maze-grpo@3f2a9c1d0b7e``,
pinned). The gateway resolves the alias to a version before a replica sees the request, so a replica's
adapter id is always ``base:name@version``, and ``name@version`` is the folder the version's files live
in (in the store, and in a replica's disk cache). :class:`ModelId` is that string as a value: one parse,
one format, and the store's own checks of the name and version, so no caller splits it by hand.

Parsing is structural (split at the first ``:``, then at the first ``@``) and checks nothing unless
asked: a route that must answer "unknown base" before "malformed adapter name" looks at the base
first, then calls :meth:`ModelId.checked`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from serving.adapters.refs import check_name, check_version
from serving.errors import BadAdapterName

# Control characters anywhere in a name are refused by their own message: they never reach an object key.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class ModelId:
    """A parsed model string. ``base`` is None for an adapter named without its base (``name`` or
    ``name@version``, as the store and the management routes take it); ``name`` is None for a base
    model alone; ``version`` is None for an alias (the version the name serves now)."""

    base: str | None
    name: str | None = None
    version: str | None = None

    @classmethod
    def parse(cls, text: str | None) -> ModelId:
        """``base``, ``base:name`` or ``base:name@version`` (split at the first ``:`` and the first
        ``@`` after it), unchecked: :meth:`checked` applies the store's rules."""
        base, sep, rest = (text or "").partition(":")
        return cls(base, *_split(rest)) if sep else cls(base)

    @classmethod
    def adapter(cls, text: str, *, check: bool = True) -> ModelId:
        """``name`` or ``name@version`` without a base (the store's and the management routes' form),
        checked unless ``check`` is off.

        Raises:
            BadAdapterName (400): with ``check``, a name or version the store would refuse.
        """
        model = cls(None, *_split(text))
        return model.checked() if check else model

    @classmethod
    def plain(cls, text: str) -> str:
        """``text`` checked as an adapter name without a version (a route that moves or removes a
        name takes no version).

        Raises:
            BadAdapterName (400): not a valid name, or a version given.
        """
        if cls.adapter(text).version is not None:
            raise BadAdapterName(f"{text!r}: name the adapter without a version here")
        return text

    def checked(self) -> ModelId:
        """This id, once its adapter part passed the store's checks (a base-only id passes as is).

        Raises:
            BadAdapterName (400): a control character anywhere in the adapter part, a name outside
                the store's form, or a version that is not 12 lowercase hex digits.
        """
        if self.name is None:
            return self
        text = self.adapter_part
        if _CONTROL.search(text):
            raise BadAdapterName(f"invalid adapter name {text!r}: control characters are not allowed")
        check_name(self.name)
        if self.version is not None:
            try:
                check_version(self.version)
            except BadAdapterName:
                raise BadAdapterName(f"invalid adapter version in {text!r}: versions are 12 lowercase hex "
                                     "digits") from None
        return self

    @property
    def adapter_part(self) -> str:
        """``name`` or ``name@version`` (empty for a base model)."""
        if self.name is None:
            return ""
        return self.name if self.version is None else f"{self.name}@{self.version}"

    @property
    def folder(self) -> str:
        """``name@version``: the folder a version's files live in (the store's key, a replica's cache)."""
        if self.name is None or self.version is None:
            raise ValueError(f"{self} names no adapter version")
        return f"{self.name}@{self.version}"

    @property
    def is_adapter(self) -> bool:
        return self.name is not None

    @property
    def unversioned(self) -> ModelId:
        """The alias this id belongs to (``base:name``), or the base model itself."""
        return replace(self, version=None)

    def at(self, version: str | None) -> ModelId:
        """The same adapter at ``version`` (None: its alias)."""
        return replace(self, version=version)

    def on(self, base: str) -> ModelId:
        """The same adapter on ``base``."""
        return replace(self, base=base)

    def __str__(self) -> str:
        if self.name is None:
            return self.base or ""
        return self.adapter_part if self.base is None else f"{self.base}:{self.adapter_part}"


def _split(rest: str) -> tuple[str, str | None]:
    name, at, version = rest.partition("@")
    return name, (version if at else None)


__all__ = ["ModelId"]
