"""Checks of a published version: its stored files still are that version, and it serves as trained.

:meth:`VersionChecks.verify` downloads a version's two objects and re-hashes them
(:func:`~serving.adapters.files.content_version_of`): a version is named by its content, so files
that hash to anything else were changed after publishing (overwritten, corrupted) and are not what
was published. :meth:`VersionChecks.fetch` is the same check on the streamed, hashed download of a
version into a folder (what a parity measurement reads). :meth:`VersionChecks.record_parity` keeps a
parity measurement's result in the ref (``serving.adapters.parity``), where every move that starts a
version serving reads it (``serving.adapters.moves``); a failed result for a version that serves
stops it serving in the same write (:func:`~serving.adapters.moves.stop_failed`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from serving.adapters.files import CONFIG, WEIGHTS, content_version_of
from serving.adapters.layout import Refs, Versions
from serving.adapters.moves import stop_failed
from serving.adapters.parity import ParityRecord, kept_parity, parity_label, parity_of, parity_record
from serving.adapters.refs import check_version, history_of, now, ref_of
from serving.errors import AdapterIntegrityError, AdapterLoadFailed, AdapterNotFound

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VerifyReport:
    """What :meth:`VersionChecks.verify` found: the version asked about, what its stored files hash
    to (``actual``) and their sizes in bytes."""

    name: str
    version: str
    actual: str
    config_bytes: int
    weights_bytes: int

    @property
    def ok(self) -> bool:
        return self.actual == self.version


class VersionChecks:
    """The version checks of :class:`serving.adapters.AdapterStore`, given what they use: the names'
    refs (read, conditionally replaced), the versions' files (their presence and bytes) and whether a
    parity check without a reference lets a version serve (``adapters.parity_without_reference``)."""

    def __init__(self, refs: Refs, versions: Versions, *, reference_free: bool = False):
        self.refs, self.versions, self.reference_free = refs, versions, reference_free

    def verify(self, name: str, version: str | None = None, *, check: bool = True) -> VerifyReport:
        """Download ``name@version`` (without ``version``: the version served now) and re-hash its
        files; they must hash to the version they were published as.

        With ``check`` off a mismatch is returned (``report.ok`` false) instead of raised.

        Raises:
            BadAdapterName (400), AdapterNotFound (404), AdapterIntegrityError (422: the files hash to
            another version, or the weights are gone), AdapterStoreUnavailable (503).
        """
        version = ref_of(name, self.refs.require(name)).version if version is None else check_version(version)
        self.versions.require(name, version)
        config = self.versions.read(name, version, CONFIG)
        try:
            weights = self.versions.read(name, version, WEIGHTS)
        except KeyError:
            raise _weights_gone(name, version) from None
        report = VerifyReport(name=name, version=version, actual=content_version_of(config, weights),
                              config_bytes=len(config), weights_bytes=len(weights))
        if not report.ok:
            log.warning("adapter %s@%s: stored files hash to %s", name, version, report.actual)
            if check:
                raise _changed(name, version, report.actual)
        return report

    def fetch(self, name: str, version: str, dest: str | Path) -> Path:
        """Download ``name@version`` into ``dest`` (the store's one download: streamed, hashed as it
        arrives) and check it as :meth:`verify` does: the files must hash to the version.

        Raises:
            BadAdapterName (400), AdapterNotFound (404), AdapterIntegrityError (422: the files hash to
            another version, or the weights are gone), AdapterStoreUnavailable (503).
        """
        check_version(version)
        self.versions.require(name, version)
        try:
            actual = self.versions.download(name, version, dest)
        except AdapterLoadFailed:  # a file is missing
            self.versions.require(name, version)  # the version was removed meanwhile (404)
            raise _weights_gone(name, version) from None
        if actual != version:
            log.warning("adapter %s@%s: stored files hash to %s", name, version, actual)
            raise _changed(name, version, actual)
        return Path(dest)

    def record_parity(self, name: str, version: str, result: dict[str, Any] | ParityRecord) -> ParityRecord:
        """Record a parity measurement of ``name@version`` in the name's ref, in one conditional write,
        replacing any earlier record of that version (see ``serving.adapters.parity`` for the fields;
        ``at`` defaults to now). Records are kept for the versions the ref's history holds, so the
        version must have been pushed, promoted or canaried under ``name``.

        A failed record of a version the name serves stops it serving in the same write (its canary
        ends, or the alias rolls back: :func:`~serving.adapters.moves.stop_failed`, recorded in the
        history with the reason).

        Raises:
            BadAdapterName (400), BadRequest (400: a malformed result), AdapterNotFound (404: no such
            name, or a version its history does not hold), AdapterRefConflict (409),
            AdapterStoreUnavailable (503).
        """
        check_version(version)
        record = parity_record(result, at=now())

        def change(doc: dict[str, Any] | None) -> dict[str, Any]:
            if doc is None:
                raise AdapterNotFound(f"adapter {name!r} not found")
            versions = [m["version"] for m in history_of(doc)]
            if version not in versions:
                raise AdapterNotFound(f"adapter {name!r} has no version {version} in its history: parity is "
                                      "recorded for versions pushed, promoted or canaried under the name")
            new = {**doc, "parity": {**kept_parity(doc, versions), version: record.__dict__}}
            if record.ok is False:
                new, move = stop_failed(new, version, record, reference_free=self.reference_free)
                stopped[:] = [move] if move else []  # the last attempt's: the write may be retried
            return new

        stopped: list = []
        self.refs.update(name, change)
        log.info("adapter %s@%s: parity %s recorded", name, version, parity_label(record))
        for move in stopped:
            log.warning("adapter %s@%s stopped serving (%s): %s", name, version, move.action, move.reason)
        return record

    def parity(self, name: str) -> dict[str, ParityRecord]:
        """The parity records of ``name``'s versions, by version (versions never measured are absent).

        Raises:
            BadAdapterName (400), AdapterNotFound (404), AdapterStoreUnavailable (503).
        """
        return parity_of(self.refs.require(name))


def _weights_gone(name: str, version: str) -> AdapterIntegrityError:
    return AdapterIntegrityError(f"adapter {name}@{version}: {WEIGHTS} is missing from the store: it was deleted "
                                 "after publishing")


def _changed(name: str, version: str, actual: str) -> AdapterIntegrityError:
    return AdapterIntegrityError(f"adapter {name}@{version}: the stored files hash to {actual}, not to version "
                                 f"{version}: they changed after publishing")


__all__ = ["VerifyReport", "VersionChecks"]
