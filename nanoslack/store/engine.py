"""Engines: a database URL made into a SQLAlchemy engine, SQLite set up the way the
store needs it (WAL, its own BEGIN IMMEDIATE), PostgreSQL on psycopg."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import URL, Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url


def parse_url(url: str) -> URL:
    """``url`` with the driver nanoslack ships: a bare postgresql:// would mean psycopg2."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def _sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
    # pysqlite's implicit transactions fight explicit ones; take over (SQLAlchemy's
    # documented recipe) and issue BEGIN ourselves in _sqlite_begin.
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    # WAL: readers (q.py, the CLI) never block the fleet; NORMAL sync keeps every
    # commit across a process crash (kill -9), which the reliability contract needs (docs/architecture.md).
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=5000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def driver(conn: Connection) -> Any:
    """The DB-API connection under ``conn`` (sqlite3 or psycopg): per-message
    statements go straight to it, because SQLAlchemy's execute path costs more
    than the statement."""
    raw = conn.connection.driver_connection
    assert raw is not None
    return raw


def _sqlite_begin(conn: Connection) -> None:
    # IMMEDIATE takes the write lock up front, so a read-then-write (the hop
    # reservation) cannot interleave with another process's.
    driver(conn).execute("BEGIN IMMEDIATE")


def make_engine(url: str) -> Engine:
    parsed = parse_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(parsed, pool_pre_ping=True)
    database = parsed.database
    if database and database != ":memory:":
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 5.0})
    event.listen(engine, "connect", _sqlite_connect)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


# Advisory-lock namespace (the first key of PostgreSQL's two-key form) and its uses.
PG_LOCK_SPACE = 0x6E73  # "ns"
PG_LOCK_MIGRATE = 1
