"""A throwaway PostgreSQL cluster on 127.0.0.1 that can be stopped and started again on its port, to
take the results database away mid-run (Debian's postgresql binaries, as tests/evaluation/conftest.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from serving.local import free_port

PG_BIN_CANDIDATES = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)


def pg_bindir() -> Path | None:
    """The newest installed PostgreSQL server's bin folder, if any."""
    return next((p for p in PG_BIN_CANDIDATES if (p / "initdb").exists()), None)


class PostgresServer:
    """``initdb`` once, then ``pg_ctl start`` / ``stop`` on one port; ``url`` is the SQLAlchemy URL of
    its ``postgres`` database (create others with :meth:`create_database`)."""

    def __init__(self) -> None:
        bindir = pg_bindir()
        if bindir is None:
            raise RuntimeError("PostgreSQL server binaries not found; `make setup-test` installs Debian's postgresql")
        self.bindir, self.port = bindir, free_port()
        # Not under pytest's tmp dirs: those are private to root, and initdb refuses to run as root.
        self.root = Path(tempfile.mkdtemp(prefix="maze-pg-outage-"))
        self.data = self.root / "data"
        user = "postgres" if os.geteuid() == 0 else None
        self._prefix = ["runuser", "-u", user, "--"] if user else []
        if user:
            shutil.chown(self.root, user=user)
        self._pg("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust")
        self.server = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}"

    def _pg(self, tool: str, *args: str) -> None:
        subprocess.run([*self._prefix, str(self.bindir / tool), *args], check=True, capture_output=True, timeout=60)

    def start(self) -> PostgresServer:
        self._pg("pg_ctl", "-D", str(self.data), "-l", str(self.root / "pg.log"), "-w", "-o",
                 f"-h 127.0.0.1 -p {self.port} -k {self.root}", "start")
        return self

    def stop(self) -> None:
        """Stop at once, dropping every client connection (as a crashed or restarted server does)."""
        self._pg("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def create_database(self, name: str) -> str:
        """Create database ``name``; its SQLAlchemy URL."""
        import psycopg

        dsn = self.server.replace("postgresql+psycopg", "postgresql")
        with psycopg.connect(dsn + "/postgres", autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return f"{self.server}/{name}"

    def remove(self) -> None:
        subprocess.run([*self._prefix, str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"],
                       capture_output=True, check=False)
        shutil.rmtree(self.root, ignore_errors=True)
