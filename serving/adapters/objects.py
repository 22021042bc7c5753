"""The adapter store's door to its objects: :class:`ObjectStore`, the project's verbs for a key-value
object store, whatever holds the bytes (S3, a local folder).

An implementation (:mod:`serving.adapters.s3`, :mod:`serving.adapters.local`) writes the verbs:
:meth:`~ObjectStore.get_tagged` (bytes and ETag), :meth:`~ObjectStore.stream` (chunks),
:meth:`~ObjectStore.put` (optionally conditional: ``if_match`` an ETag, ``if_none_match``),
:meth:`~ObjectStore.head`, :meth:`~ObjectStore.delete`, :meth:`~ObjectStore.list` (one paginated
listing, in key order) and :meth:`~ObjectStore.ensure_bucket`; the JSON documents, the one
conditional-replace loop (:meth:`~ObjectStore.replace_json`) and a handle scoped to a sub-prefix
(:meth:`~ObjectStore.scoped`) come with this base, written once on top of the verbs.

Keys are relative to the handle's root (the store's prefix), ``/``-separated. Errors are the
project's: a missing object is ``KeyError``, a lost conditional write :class:`ObjectChanged`, any
other failure :class:`~serving.errors.AdapterStoreUnavailable` (503, never "not found", so an
outage is not remembered as a missing adapter), with a message that names the failure's kind and
never an endpoint or a key (clients read it).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any

from serving.errors import AdapterRefConflict

WRITE_ATTEMPTS = 5  # conditional-write retries before a replace gives up as conflicting
CHUNK = 1 << 18  # bytes per chunk of a streamed read (a download's last chunk's hash is what the hash adds)
PAGE = 1000  # keys per listing page (S3's largest)


class ObjectChanged(Exception):
    """A conditional write lost a race: the object changed or vanished since it was read."""


class ObjectStore(ABC):
    """The objects under one prefix, through the project's verbs (see the module)."""

    # -- the verbs an implementation writes ------------------------------------------------------
    @abstractmethod
    def get_tagged(self, key: str) -> tuple[bytes, str | None]:
        """The object's bytes and its ETag (what ``put(if_match=...)`` compares). KeyError when missing."""

    @abstractmethod
    def stream(self, key: str, chunk_size: int = CHUNK) -> Iterator[bytes]:
        """The object's bytes in chunks, for a download that hashes as it goes. The object is opened
        before this returns (KeyError when missing); a failure mid-transfer raises from the iteration."""

    @abstractmethod
    def put(self, key: str, data: bytes, *, if_match: str | None = None, if_none_match: bool = False,
            content_type: str | None = None) -> None:
        """Write the object whole. ``if_match``: only over the object with that ETag (KeyError when it
        is gone); ``if_none_match``: only where there is none. ObjectChanged when the condition fails."""

    @abstractmethod
    def head(self, key: str) -> int:
        """The object's size in bytes. KeyError when missing."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object (nothing happens when there is none)."""

    @abstractmethod
    def list(self, prefix: str = "", *, start_after: str | None = None, page_size: int = PAGE) -> Iterator[str]:
        """The keys starting with ``prefix`` (after ``start_after`` when given), in key order, read a page
        of ``page_size`` at a time as the caller goes on: stopping early reads no further page."""

    @abstractmethod
    def ensure_bucket(self) -> None:
        """Create what holds the objects when it is missing (a local S3 server starts empty)."""

    # -- written once on top of the verbs -----------------------------------------------------------
    def get(self, key: str) -> bytes:
        """The object's bytes. KeyError when missing."""
        return self.get_tagged(key)[0]

    def read_json(self, key: str) -> tuple[dict[str, Any] | None, str | None]:
        """The JSON document at ``key`` and its ETag, or (None, None) when there is none."""
        try:
            data, etag = self.get_tagged(key)
        except KeyError:
            return None, None
        return json.loads(data), etag

    def put_json(self, key: str, doc: dict[str, Any], *, if_match: str | None = None,
                 if_none_match: bool = False) -> None:
        self.put(key, json.dumps(doc).encode(), if_match=if_match, if_none_match=if_none_match,
                 content_type="application/json")

    def replace_json(self, key: str, change: Callable[[dict[str, Any] | None], dict[str, Any] | None],
                     what: str) -> dict[str, Any] | None:
        """Replace the document at ``key`` with ``change(current)`` in one conditional write (``if_match``
        the ETag read, ``if_none_match`` when new), re-reading and re-applying on a lost race: the one
        loop behind every alias move and every pin.

        ``change`` returns None to leave the document as it is, and may raise to refuse. Returns the
        document now in force.

        Raises:
            AdapterRefConflict (409): ``what`` changed concurrently on every attempt.
        """
        for _ in range(WRITE_ATTEMPTS):
            doc, etag = self.read_json(key)
            new = change(doc)
            if new is None:
                return doc
            try:
                self.put_json(key, new, if_match=etag, if_none_match=not etag)
            except (ObjectChanged, KeyError):  # KeyError: the document was removed since it was read
                continue
            return new
        raise AdapterRefConflict(f"{what} changed concurrently {WRITE_ATTEMPTS} times; try again")

    def scoped(self, prefix: str) -> ObjectStore:
        """A handle on the objects under ``prefix`` (ending in ``/``): its keys are relative to it."""
        return Scoped(self, prefix)


class Scoped(ObjectStore):
    """The objects of ``inner`` under ``prefix``, with keys relative to it (what :meth:`ObjectStore.scoped` returns)."""

    def __init__(self, inner: ObjectStore, prefix: str):
        self.inner, self.prefix = inner, prefix

    def get_tagged(self, key: str) -> tuple[bytes, str | None]:
        return self.inner.get_tagged(self.prefix + key)

    def stream(self, key: str, chunk_size: int = CHUNK) -> Iterator[bytes]:
        return self.inner.stream(self.prefix + key, chunk_size)

    def put(self, key: str, data: bytes, *, if_match: str | None = None, if_none_match: bool = False,
            content_type: str | None = None) -> None:
        self.inner.put(self.prefix + key, data, if_match=if_match, if_none_match=if_none_match,
                       content_type=content_type)

    def head(self, key: str) -> int:
        return self.inner.head(self.prefix + key)

    def delete(self, key: str) -> None:
        self.inner.delete(self.prefix + key)

    def list(self, prefix: str = "", *, start_after: str | None = None, page_size: int = PAGE) -> Iterator[str]:
        after = None if start_after is None else self.prefix + start_after
        for key in self.inner.list(self.prefix + prefix, start_after=after, page_size=page_size):
            yield key[len(self.prefix):]

    def ensure_bucket(self) -> None:
        self.inner.ensure_bucket()

    def scoped(self, prefix: str) -> ObjectStore:
        return Scoped(self.inner, self.prefix + prefix)


__all__ = ["CHUNK", "PAGE", "WRITE_ATTEMPTS", "ObjectChanged", "ObjectStore", "Scoped"]
