"""A local folder behind the adapter store's door (``file:///path``): the second implementation of
:class:`~serving.adapters.objects.ObjectStore`, for a store on one machine (or a shared filesystem)
and for the store's own tests, which run against it beside S3.

A key is a path under the folder (``_refs/agent.json``, ``agent@0123456789ab/adapter_config.json``).
Every write lands whole: it goes to a temporary file beside the object and is renamed over it
(``os.replace``), so a reader sees the old bytes or the new, never a part. An object's ETag is the
sha256 of its bytes; a conditional write compares it under one lock of the folder (``fcntl.flock``
on ``.lock``, which threads and processes alike wait for), so two writers racing never both win, as
with S3's ``If-Match``. Names starting with ``.`` (those temporary files, the lock) are the
folder's own and are never listed.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from serving.adapters.objects import CHUNK, PAGE, ObjectChanged, ObjectStore
from serving.config import AdapterStoreSpec
from serving.errors import AdapterStoreUnavailable

SCHEME = "file://"
LOCK = ".lock"


class LocalObjects(ObjectStore):
    """The objects under a local folder, the path of a ``file:///path`` prefix."""

    def __init__(self, spec: AdapterStoreSpec):
        self.spec = spec
        self.folder = Path(spec.prefix.removeprefix(SCHEME))

    def _path(self, key: str) -> Path:
        """The file of ``key``; ValueError for a key that would name no object of this folder (an empty
        part, ``..``, a name of the folder's own)."""
        parts = key.split("/")
        if any(not p or p.startswith(".") for p in parts):
            raise ValueError(f"not an object key of a local store: {key!r}")
        return self.folder.joinpath(*parts)

    def _existing(self, key: str) -> Path:
        """The file of a key read: one that cannot be an object is missing (KeyError), as on S3."""
        try:
            return self._path(key)
        except ValueError:
            raise KeyError(key) from None

    @contextmanager
    def _translated(self, key: str):
        """A missing file is KeyError; any other OS failure AdapterStoreUnavailable, naming no path."""
        try:
            yield
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise KeyError(key) from None
        except OSError as exc:
            raise AdapterStoreUnavailable(f"the local adapter store failed ({type(exc).__name__}); "
                                          "try again in a few seconds") from exc

    def get_tagged(self, key: str) -> tuple[bytes, str | None]:
        with self._translated(key):
            data = self._existing(key).read_bytes()
        return data, hashlib.sha256(data).hexdigest()

    def stream(self, key: str, chunk_size: int = CHUNK) -> Iterator[bytes]:
        with self._translated(key):
            fh = open(self._existing(key), "rb")  # noqa: SIM115 - closed by the generator
        return self._chunks(fh, key, chunk_size)

    def _chunks(self, fh, key: str, chunk_size: int) -> Iterator[bytes]:
        with fh, self._translated(key):
            yield from iter(lambda: fh.read(chunk_size), b"")

    def put(self, key: str, data: bytes, *, if_match: str | None = None, if_none_match: bool = False,
            content_type: str | None = None) -> None:
        path = self._path(key)
        with self._translated(key):
            if if_match is None and not if_none_match:
                self._write(path, data)
                return
            with self._locked():
                current = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
                if if_match is not None and current is None:
                    raise KeyError(key)
                if (if_match is not None and current != if_match) or (if_none_match and current is not None):
                    raise ObjectChanged(key)
                self._write(path, data)

    def _write(self, path: Path, data: bytes) -> None:
        """``data`` to ``path`` whole: a temporary file beside it, renamed over it."""
        part = path.with_name(f".{path.name}.{uuid.uuid4().hex}.part")
        for attempt in range(3):
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                part.write_bytes(data)
                break
            except FileNotFoundError:  # a removal emptied and removed the folder meanwhile
                if attempt == 2:
                    raise
        try:
            os.replace(part, path)
        finally:
            part.unlink(missing_ok=True)

    @contextmanager
    def _locked(self):
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / LOCK, "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def head(self, key: str) -> int:
        path = self._existing(key)
        with self._translated(key):
            if not path.is_file():
                raise FileNotFoundError(key)
            return path.stat().st_size

    def delete(self, key: str) -> None:
        """Remove the object and the folders it leaves empty (up to the store's folder)."""
        path = self._path(key)
        with self._translated(key):
            path.unlink(missing_ok=True)
        for parent in path.parents:
            if parent == self.folder or self.folder not in parent.parents:
                break
            try:
                parent.rmdir()
            except OSError:  # not empty (or gone): the folders above are not empty either
                break

    def list(self, prefix: str = "", *, start_after: str | None = None, page_size: int = PAGE) -> Iterator[str]:
        """The keys in key order; the folder is read once, so ``page_size`` changes nothing here."""
        top = self.folder.joinpath(*prefix.split("/")[:-1])
        keys = []
        with self._translated(prefix):
            for here, dirs, files in os.walk(top):
                dirs[:] = [d for d in dirs if not d.startswith(".")]
                rel = Path(here).relative_to(self.folder).as_posix()
                keys += [f"{rel}/{f}" if rel != "." else f for f in files if not f.startswith(".")]
        yield from sorted(k for k in keys if k.startswith(prefix) and (start_after is None or k > start_after))

    def ensure_bucket(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)


__all__ = ["SCHEME", "LocalObjects"]
