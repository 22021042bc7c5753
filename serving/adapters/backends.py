"""Which :class:`~serving.adapters.objects.ObjectStore` a store's prefix opens: its URL scheme picks the
implementation. A new kind of store is one file implementing the door and one line here.
"""

from __future__ import annotations

from collections.abc import Callable

from serving.adapters.local import LocalObjects
from serving.adapters.objects import ObjectStore
from serving.adapters.s3 import S3Objects
from serving.config import AdapterStoreSpec

#: URL scheme of a store's prefix -> the door's implementation for it.
SCHEMES: dict[str, Callable[[AdapterStoreSpec], ObjectStore]] = {"s3": S3Objects, "file": LocalObjects}


def open_objects(spec: AdapterStoreSpec) -> ObjectStore:
    """The objects under ``spec.prefix`` (``s3://bucket/prefix``, ``file:///folder``), keys relative to it."""
    scheme = spec.prefix.partition("://")[0]
    if scheme not in SCHEMES:
        raise ValueError(f"no object store for {scheme}:// prefixes (known: {', '.join(sorted(SCHEMES))})")
    return SCHEMES[scheme](spec)


__all__ = ["SCHEMES", "open_objects"]
