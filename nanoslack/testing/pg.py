"""A throwaway PostgreSQL server for the suite (docs/operations.md).

``initdb`` + ``pg_ctl`` in a fresh directory, on a free port of 127.0.0.1, with
fsync off: the data dies with the test session. PostgreSQL refuses to run as
root, so under root the server runs as the ``postgres`` user from a directory that
user owns. Each test gets its own database, copied from a migrated template, so
tests never see each other's rows.
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import psycopg

from nanoslack.store import Store

DEFAULT_BIN = Path("/usr/lib/postgresql/15/bin")
TEMPLATE = "nanoslack_template"


def find_bin_dir() -> Path | None:
    """Where ``initdb``/``pg_ctl`` live (``NANOSLACK_PG_BIN`` overrides), or None."""
    override = os.environ.get("NANOSLACK_PG_BIN")
    candidates = [Path(override)] if override else [DEFAULT_BIN]
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).parent)
    for cand in candidates:
        if (cand / "initdb").is_file() and (cand / "pg_ctl").is_file():
            return cand
    return None


def skip_reason() -> str | None:
    """Why the PostgreSQL cases cannot run here, or None."""
    if find_bin_dir() is None:
        return "no PostgreSQL server binaries (initdb, pg_ctl) found; set NANOSLACK_PG_BIN"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run the server as"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="nanoslack-pg-"))
        self.data = self.root / "data"
        self.sock = self.root / "sock"
        self.log = self.root / "server.log"
        self.port = 0
        self._as_root = os.geteuid() == 0
        self._names = itertools.count(1)

    def _run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        cmd = list(argv)
        if self._as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=60)

    def start(self) -> PgServer:
        self.sock.mkdir()
        if self._as_root:
            pw = pwd.getpwnam("postgres")
            for path in (self.root, self.sock):
                os.chown(path, pw.pw_uid, pw.pw_gid)
        self._run(
            str(self.bin_dir / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust",
            "-E", "UTF8", "--no-sync",
        )  # fmt: skip
        self.port = _free_port()
        self.start_server()
        self.create_database(TEMPLATE)
        Store.open(self.url(TEMPLATE)).close()  # migrated once; every test copies it
        return self

    def _options(self) -> str:
        return (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.sock} -c fsync=off"
            " -c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
        )

    def _pg_ctl(self, *argv: str) -> None:
        self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), *argv)

    def start_server(self) -> None:
        """Start the server (again) on the same port and data directory."""
        self._pg_ctl("-l", str(self.log), "-w", "-o", self._options(), "start")

    def stop_server(self) -> None:
        """Stop the server as an operator would (``-m fast``: sessions are cut, the
        data kept); ``start_server`` brings it back."""
        self._pg_ctl("-m", "fast", "-w", "stop")

    def restart(self) -> None:
        """``pg_ctl restart``: every session is cut, the server is back at once."""
        self._pg_ctl("-l", str(self.log), "-m", "fast", "-w", "-o", self._options(), "restart")

    def terminate_backends(self, url: str) -> int:
        """``pg_terminate_backend`` every session of ``url``'s database but ours: the
        fleet's connections die under it, the server stays up."""
        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.url("postgres", driver="postgresql"), autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            ).fetchall()
        return sum(1 for (killed,) in rows if killed)

    def stop(self) -> None:
        try:
            if self.port:
                self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def url(self, dbname: str, *, driver: str = "postgresql+psycopg") -> str:
        return f"{driver}://postgres@127.0.0.1:{self.port}/{dbname}"

    def _admin(self, statement: str) -> None:
        with psycopg.connect(self.url("postgres", driver="postgresql"), autocommit=True) as conn:
            conn.execute(statement)

    def create_database(self, name: str | None = None, *, template: str | None = None) -> str:
        name = name or f"t{next(self._names)}"
        suffix = f" TEMPLATE {template}" if template else ""
        self._admin(f'CREATE DATABASE "{name}"{suffix}')
        return name

    def fresh_database(self) -> str:
        """A new database with nanoslack's schema; its SQLAlchemy URL."""
        return self.url(self.create_database(template=TEMPLATE))

    def drop_database(self, url: str) -> None:
        name = url.rsplit("/", 1)[1]
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def psql(self, url: str, statement: str) -> subprocess.CompletedProcess[str]:
        """Run ``statement`` with the real ``psql`` client, as an operator would."""
        plain = url.replace("postgresql+psycopg://", "postgresql://", 1)
        return subprocess.run(
            ["psql", plain, "-v", "ON_ERROR_STOP=1", "-X", "-c", statement],
            check=True,
            capture_output=True,
            text=True,
            timeout=30,
        )
