"""A key file checked offline, by the gateway's own reader and rules (``maze-serve keys check``).

The file is read and loaded by :func:`~serving.auth.key_file.read_key_file` and
:func:`~serving.auth.keys.load_key_file`, what the :class:`~serving.auth.keys.KeyRing` of every
replica runs, so a file the check passes loads in the gateway, and one it fails is refused there
with the same words. Like the gateway's, the report names entries and fields, never a value.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from serving.auth.key_file import KeySourceError, read_key_file
from serving.auth.keys import load_key_file


@dataclass(frozen=True)
class KeyFileCheck:
    """What the gateway would make of one key file: its problems (it would be refused), else its keys
    and notices (it loads, but an entry should be changed)."""

    path: str
    problems: tuple[str, ...] = ()
    reason: str | None = None  # the gateway's metric label for the failure (key_source_errors)
    notices: tuple[str, ...] = ()
    entries: int = 0  # keys in the file
    keys: int = 0  # keys that answer (neither disabled nor without secrets)
    secrets: int = 0  # secrets and digests of those keys
    names: tuple[str, ...] = ()  # the names of the keys that answer

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict:
        return {"path": self.path, "ok": self.ok, "reason": self.reason, "problems": list(self.problems),
                "notices": list(self.notices), "entries": self.entries, "keys": self.keys, "secrets": self.secrets,
                "names": list(self.names)}


def check_key_file(path: str | Path) -> KeyFileCheck:
    """The gateway's verdict on the key file at ``path``; never raises for a bad file (any failure
    of the gateway's reader is a problem of the report, as it is a failed read in the gateway)."""
    try:
        loaded = load_key_file(read_key_file(path))
    except KeySourceError as exc:
        return KeyFileCheck(str(path), problems=exc.problems, reason=exc.reason)
    except Exception as exc:  # noqa: BLE001 - as the gateway's last guard: the type only (the text may hold a value)
        return KeyFileCheck(str(path), problems=(f"cannot be used ({type(exc).__name__})",), reason="error")
    names = tuple(sorted({p.name for p in loaded.keys.values()}))
    return KeyFileCheck(str(path), notices=loaded.notices, entries=loaded.entries, keys=len(names),
                        secrets=len(loaded.keys), names=names)


__all__ = ["KeyFileCheck", "check_key_file"]
