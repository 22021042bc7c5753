"""Fixtures for evaluation tests: the results store on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

from serving.local import free_port

PG_BIN_CANDIDATES = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)


@pytest.fixture(scope="session")
def postgres_server():
    """A throwaway PostgreSQL cluster on 127.0.0.1 (Debian's postgresql package, see `make setup-test`)."""
    bindir = next((p for p in PG_BIN_CANDIDATES if (p / "initdb").exists()), None)
    if bindir is None:
        pytest.fail("PostgreSQL server binaries not found; `make setup-test` installs Debian's postgresql")
    # Not under pytest's tmp dirs: those are private to root, and initdb refuses to run as root.
    root = Path(tempfile.mkdtemp(prefix="maze-pg-"))
    data = root / "data"
    user = "postgres" if os.geteuid() == 0 else None
    prefix = ["runuser", "-u", user, "--"] if user else []
    if user:
        shutil.chown(root, user=user)
    port = free_port()
    subprocess.run([*prefix, str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust"],
                   check=True, capture_output=True)
    log = data.parent / "pg.log"
    subprocess.run([*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-o",
                    f"-h 127.0.0.1 -p {port} -k {data.parent}", "start"], check=True, capture_output=True)
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}"
    finally:
        subprocess.run([*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"], capture_output=True, check=False)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """A fresh, empty results database of each kind."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'results.db'}"
    server = request.getfixturevalue("postgres_server")
    import psycopg

    name = "t_" + uuid.uuid4().hex[:10]
    dsn = server.replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(dsn + "/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return f"{server}/{name}"
