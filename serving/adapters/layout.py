"""The adapter store's key layout under its prefix, and the reads and writes of each part.

::

    {name}@{version}/adapter_model.safetensors   immutable; version = content hash
    {name}@{version}/adapter_config.json         written after the weights: its presence
                                                 marks a complete upload
    _refs/{name}.json                            the name's ref document (serving.adapters.refs)

:class:`Refs` reads and conditionally replaces the ref documents and lists the names;
:class:`Versions` uploads, checks, reads, downloads and deletes the versions' files. Both work through
the store's door (:class:`~serving.adapters.objects.ObjectStore`), so this is the one place that
knows where anything lives: the store and its moves and checks (``serving.adapters.store``,
``moves``, ``checks``) are given these two and build no key themselves.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from serving.adapters.files import CONFIG, WEIGHTS, receive_version
from serving.adapters.objects import PAGE, ObjectStore
from serving.adapters.refs import REFS, check_name
from serving.errors import AdapterNotFound

RefChange = Callable[[dict[str, Any] | None], dict[str, Any] | None]


class Refs:
    """The names' ref documents (``_refs/{name}.json``): one small object per name, the alias."""

    def __init__(self, objects: ObjectStore):
        self.objects = objects

    @staticmethod
    def key(name: str) -> str:
        return f"{REFS}/{name}.json"

    def read(self, name: str) -> tuple[dict[str, Any] | None, str | None]:
        """The ref document and its ETag, or (None, None) when the name is not published.

        Raises:
            BadAdapterName (400), AdapterStoreUnavailable (503).
        """
        return self.objects.read_json(self.key(check_name(name)))

    def require(self, name: str) -> dict[str, Any]:
        """The ref document of a published name.

        Raises:
            BadAdapterName (400), AdapterNotFound (404), AdapterStoreUnavailable (503).
        """
        doc, _ = self.read(name)
        if doc is None:
            raise AdapterNotFound(f"adapter {name!r} not found")  # no location: clients read it
        return doc

    def update(self, name: str, change: RefChange) -> dict[str, Any]:
        """Replace the ref with ``change(current document)`` in one conditional write
        (:meth:`ObjectStore.replace_json <serving.adapters.objects.ObjectStore.replace_json>`); ``change``
        returns None to leave the ref as it is, and may raise to refuse. Returns the document now in force.

        Raises:
            BadAdapterName (400), AdapterRefConflict (409), AdapterStoreUnavailable (503), and what
            ``change`` raises.
        """
        return self.objects.replace_json(self.key(check_name(name)), change, f"adapter {name!r}")

    def delete(self, name: str) -> None:
        self.objects.delete(self.key(name))

    def names(self, after: str | None = None, page_size: int = PAGE) -> Iterator[str]:
        """The names of the ref documents in key order, after ``after`` (where it would sort), read a
        page at a time: stray keys are named too (callers keep the valid names)."""
        start = self.key(after) if after else None
        for key in self.objects.list(f"{REFS}/", start_after=start, page_size=page_size):
            yield key.rsplit("/", 1)[1].removesuffix(".json")


class Versions:
    """The versions' files (``{name}@{version}/``): immutable once written, named by their content."""

    def __init__(self, objects: ObjectStore):
        self.objects = objects

    @staticmethod
    def key(name: str, version: str, fname: str = "") -> str:
        """The key of a version's file (without ``fname``: its folder, as Ray Serve LLM downloads it)."""
        return f"{name}@{version}/{fname}"

    def require(self, name: str, version: str) -> None:
        """Raise AdapterNotFound (404) unless ``name@version`` was uploaded whole."""
        try:
            # adapter_config.json is written after the weights: its presence marks a complete upload.
            self.objects.head(self.key(name, version, CONFIG))
        except KeyError:
            raise AdapterNotFound(f"adapter {name!r} has no version {version!r}") from None

    def rank(self, name: str, version: str) -> int | None:
        """The rank ``r`` of the version's adapter_config.json (None when it is not an int)."""
        rank = json.loads(self.objects.get(self.key(name, version, CONFIG))).get("r")
        return rank if isinstance(rank, int) else None

    def read(self, name: str, version: str, fname: str) -> bytes:
        """One of the version's files. KeyError when it is missing."""
        return self.objects.get(self.key(name, version, fname))

    def upload(self, folder: str | Path, name: str, version: str) -> None:
        """A local adapter folder's two files as ``name@version``: the weights first, then the config
        that marks the upload complete."""
        for fname in (WEIGHTS, CONFIG):
            self.objects.put(self.key(name, version, fname), (Path(folder) / fname).read_bytes())

    def download(self, name: str, version: str, dest: str | Path, *, hashed: bool = True) -> str | None:
        """The version's files into ``dest``, streamed and hashed as they arrive
        (:func:`~serving.adapters.files.receive_version`); returns their content version (None when
        not ``hashed``)."""
        return receive_version(lambda fname: self.objects.stream(self.key(name, version, fname)), dest, hashed=hashed)

    def delete_all(self, name: str) -> None:
        """Delete every version of ``name``."""
        for key in self.objects.list(f"{name}@"):
            self.objects.delete(key)


__all__ = ["Refs", "Versions"]
