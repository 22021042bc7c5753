"""SkyRL's config keys, as read from the skyrl wheel by ``scripts/extract_skyrl_keys.py``.

Used to reject an override SkyRL would not accept before a job is submitted (a typo in a key
otherwise fails only once the job has started on the cluster).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

SKYRL_VERSION = "0.4.0"
_KEYS_FILE = Path(__file__).with_name(f"skyrl_config_keys_{SKYRL_VERSION}.txt")


@cache
def load_keys(path: Path = _KEYS_FILE) -> dict[str, str]:
    """``{dotted key: type}`` from a key list file (``#`` lines are comments)."""
    keys: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            key, _, type_name = line.partition("\t")
            keys[key] = type_name
    return keys


def key_version(path: Path = _KEYS_FILE) -> str:
    """The skyrl version named in the key list's header."""
    return path.read_text().split()[2].rstrip(":")


def is_known_key(key: str, keys: dict[str, str] | None = None) -> bool:
    """True for a leaf key, or a sub-key of a ``dict``-typed key (e.g. ``engine_init_kwargs.x``)."""
    keys = load_keys() if keys is None else keys
    if key in keys:
        return True
    parts = key.split(".")
    return any(keys.get(".".join(parts[:n])) == "dict" for n in range(1, len(parts)))


def unknown_keys(overrides: list[str], keys: dict[str, str] | None = None) -> list[str]:
    """The keys of ``key=value`` overrides that SkyRL's config does not have."""
    return [o.partition("=")[0] for o in overrides if not is_known_key(o.partition("=")[0], keys)]
