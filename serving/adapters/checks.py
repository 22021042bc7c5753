"""Checks of a published version: its stored files still are that version, and it serves as trained.

:meth:`VersionChecks.verify` downloads a version's two objects and re-hashes them
(:func:`~serving.adapters.files.content_version_of`): a version is named by its content, so files
that hash to anything else were changed after publishing (overwritten, corrupted) and are not what
was published. :meth:`VersionChecks.record_parity` keeps a parity measurement's result in the ref
(``serving.adapters.parity``), where :meth:`promote <serving.adapters.AdapterStore.promote>` reads it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from serving.adapters.files import CONFIG, WEIGHTS, content_version_of
from serving.adapters.parity import ParityRecord, kept_parity, parity_of, parity_record
from serving.adapters.refs import check_version, history_of, now
from serving.errors import AdapterIntegrityError, AdapterNotFound

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
    """The version checks of :class:`serving.adapters.AdapterStore`, which this is mixed into: they
    use the store's ref reads and conditional writes (``resolve``, ``_read_ref``, ``_update_ref``),
    its version check (``_require_version``), its bucket (``s3``) and its prefix (``spec``, ``root``)."""

    def verify(self, name: str, version: str | None = None, *, check: bool = True) -> VerifyReport:
        """Download ``name@version`` (without ``version``: the version served now) and re-hash its
        files; they must hash to the version they were published as.

        With ``check`` off a mismatch is returned (``report.ok`` false) instead of raised.

        Raises:
            BadAdapterName (400), AdapterNotFound (404), AdapterIntegrityError (422: the files hash to
            another version, or the weights are gone), AdapterStoreUnavailable (503).
        """
        version = self.resolve(name).version if version is None else check_version(version)
        self._require_version(name, version)
        folder = f"{self.root}{name}@{version}/"
        config = self.s3.call("get_object", Key=folder + CONFIG)["Body"].read()
        try:
            weights = self.s3.call("get_object", Key=folder + WEIGHTS)["Body"].read()
        except KeyError:
            raise AdapterIntegrityError(f"adapter {name}@{version}: {WEIGHTS} is missing from the store: it was "
                                        "deleted after publishing") from None
        report = VerifyReport(name=name, version=version, actual=content_version_of(config, weights),
                              config_bytes=len(config), weights_bytes=len(weights))
        if not report.ok:
            log.warning("adapter %s@%s: stored files hash to %s", name, version, report.actual)
            if check:
                raise AdapterIntegrityError(f"adapter {name}@{version}: the stored files hash to {report.actual}, "
                                            f"not to version {version}: they changed after publishing")
        return report

    def record_parity(self, name: str, version: str, result: dict[str, Any] | ParityRecord) -> ParityRecord:
        """Record a parity measurement of ``name@version`` in the name's ref, in one conditional write,
        replacing any earlier record of that version (see ``serving.adapters.parity`` for the fields;
        ``at`` defaults to now). Records are kept for the versions the ref's history holds, so the
        version must have been pushed, promoted or canaried under ``name``.

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
            return {**doc, "parity": {**kept_parity(doc, versions), version: record.__dict__}}

        self._update_ref(name, change)
        log.info("adapter %s@%s: parity %s recorded", name, version, "ok" if record.ok else "FAILED")
        return record

    def parity(self, name: str) -> dict[str, ParityRecord]:
        """The parity records of ``name``'s versions, by version (versions never measured are absent).

        Raises:
            BadAdapterName (400), AdapterNotFound (404), AdapterStoreUnavailable (503).
        """
        doc, _ = self._read_ref(name)
        if doc is None:
            raise AdapterNotFound(f"adapter {name!r} not found")
        return parity_of(doc)


__all__ = ["VerifyReport", "VersionChecks"]
