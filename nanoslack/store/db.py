"""Engine, connection and schema versioning.

One ``Store`` per process holds one SQLAlchemy connection: the fleet runs on one
asyncio loop, and SQLite serialises writers anyway, so a pool would only add
checkout cost on the hot path. A re-entrant lock keeps the odd call from another
thread (tests, CLI helpers) safe.

PostgreSQL (docs/operations.md) runs the same SQL at READ COMMITTED: what SQLite's single
writer gives for free is spelled out there as an advisory lock per room (hops), a
lock around migrations, and the ``cache_version`` row kept by triggers.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import Connection, Engine, RootTransaction, TextClause, create_engine, event, inspect, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url
from sqlmodel import SQLModel

# Imported for its side effect: it registers every table on SQLModel.metadata.
from nanoslack.store import tables  # noqa: F401

SCHEMA_VERSION = 11


class StoreError(RuntimeError):
    pass


class StoreUnavailable(StoreError):
    """The store cannot take work now, through no fault of the work: the connection was
    lost, the server is down or starting, the disk is full or read-only, a lock could
    not be had, or the transaction was a deadlock's victim. The same work, tried again
    once the store answers, succeeds; nothing about it is to be counted as a failure."""

    def __init__(self, reason: str, *, deadlock: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        # A deadlock's victim may try again at once: the other transaction has gone on.
        self.deadlock = deadlock


# PostgreSQL SQLSTATEs (or their two-character classes) that say "not now", not "wrong":
# connection exceptions (08), insufficient resources (53: disk full, too many
# connections), operator intervention (57: admin shutdown, e.g. pg_terminate_backend;
# the server starting up), system errors (58: I/O), lock not available (55P03),
# serialization failure (40001) and deadlock (40P01).
_PG_UNAVAILABLE_CLASSES = ("08", "53", "57", "58")
_PG_RETRY_STATES = {"40001", "55P03"}
_PG_DEADLOCK = "40P01"
# SQLite's primary result codes that say the same: the disk is full, the file is
# read-only or cannot be opened, an I/O error, the database is locked (past
# busy_timeout) or changed its schema under us.
_SQLITE_UNAVAILABLE = {
    "SQLITE_FULL",
    "SQLITE_READONLY",
    "SQLITE_IOERR",
    "SQLITE_CANTOPEN",
    "SQLITE_BUSY",
    "SQLITE_LOCKED",
    "SQLITE_PROTOCOL",
}


def store_unavailable(error: BaseException) -> StoreUnavailable | None:
    """``error`` as a ``StoreUnavailable`` when it means the store cannot take work now
    (see the class), else None: a bug or a constraint is not retried, it is reported.
    The driver's error is looked for under SQLAlchemy's wrapper and the raw driver
    calls of ``hot_execute`` alike, and along the chain of causes (a failed rollback
    raised while handling the first error)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        found = _classify(current)
        if found is not None:
            return found
        current = current.__cause__ or current.__context__
    return None


def _classify(error: BaseException) -> StoreUnavailable | None:
    if isinstance(error, StoreUnavailable):
        return error
    if isinstance(error, sa_exc.DBAPIError):
        orig = error.orig
        if orig is not None:
            found = _classify(orig)
            if found is not None:
                return found
        if error.connection_invalidated:
            return StoreUnavailable(f"connection lost: {_first_line(error.orig or error)}")
        return None
    if isinstance(error, psycopg.Error):
        state = error.sqlstate or ""
        if state == _PG_DEADLOCK:
            return StoreUnavailable(f"deadlock detected: {_first_line(error)}", deadlock=True)
        if state in _PG_RETRY_STATES or state[:2] in _PG_UNAVAILABLE_CLASSES:
            return StoreUnavailable(_first_line(error))
        # No SQLSTATE: the client side of a lost connection ("the connection is lost",
        # "connection failed: ... Connection refused", "the connection is closed").
        if not state and isinstance(error, psycopg.OperationalError | psycopg.InterfaceError):
            return StoreUnavailable(f"connection lost: {_first_line(error)}")
        return None
    if isinstance(error, sqlite3.DatabaseError):
        # Extended codes name their primary first: SQLITE_READONLY_DBMOVED, SQLITE_IOERR_WRITE.
        primary = "_".join((getattr(error, "sqlite_errorname", "") or "").split("_")[:2])
        return StoreUnavailable(_first_line(error)) if primary in _SQLITE_UNAVAILABLE else None
    if isinstance(error, sa_exc.PendingRollbackError | sa_exc.ResourceClosedError):
        return StoreUnavailable(f"connection lost: {_first_line(error)}")
    return None


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0][:300] if lines else type(error).__name__


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


def _driver(conn: Connection) -> Any:
    """The DB-API connection under ``conn`` (sqlite3 or psycopg): per-message
    statements go straight to it, because SQLAlchemy's execute path costs more
    than the statement."""
    raw = conn.connection.driver_connection
    assert raw is not None
    return raw


def _sqlite_begin(conn: Connection) -> None:
    # IMMEDIATE takes the write lock up front, so a read-then-write (the hop
    # reservation) cannot interleave with another process's.
    _driver(conn).execute("BEGIN IMMEDIATE")


def make_engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        # A bare postgresql:// would mean psycopg2, which nanoslack does not ship.
        parsed = parsed.set(drivername="postgresql+psycopg")
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

# Tables whose rows the router and the gate cache; writes to them bump cache_version
# on PostgreSQL. engaged_threads only matters when a row disappears.
_CACHED_TABLES = {
    "messaging_groups": "INSERT OR UPDATE OR DELETE",
    "users": "INSERT OR UPDATE OR DELETE",
    "agent_groups": "INSERT OR UPDATE OR DELETE",
    "agent_group_members": "INSERT OR UPDATE OR DELETE",
    "engaged_threads": "DELETE",
    "a2a_rooms": "INSERT OR UPDATE OR DELETE",
}
_BUMP_FUNCTION = """
CREATE OR REPLACE FUNCTION nanoslack_bump_cache_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE cache_version SET version = version + 1 WHERE id = 1;
  RETURN NULL;
END $$
"""


def _create_tables(conn: Connection) -> None:
    # create_all only adds missing tables, so every version can call it.
    SQLModel.metadata.create_all(conn)


def _v2_cache_version(conn: Connection) -> None:
    """Version 2: cache_version (kept by triggers on PostgreSQL) and instance_leases."""
    _create_tables(conn)
    conn.execute(text("INSERT INTO cache_version (id, version) VALUES (1, 0) ON CONFLICT DO NOTHING"))
    if conn.dialect.name != "postgresql":
        return
    conn.exec_driver_sql(_BUMP_FUNCTION)
    for table in _CACHED_TABLES:
        _cache_trigger(conn, table)


def _cache_trigger(conn: Connection, table: str) -> None:
    """PostgreSQL: writes to ``table`` move ``cache_version`` (another process's cache of it
    is dropped on its next transaction)."""
    if not inspect(conn).has_table(table):
        return  # created by a later version, which adds its trigger then
    name = f"{table}_bumps_cache_version"
    conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name} ON {table}")
    # Row-level: an upsert that changes nothing (the router's users.ensure on
    # every new sender) fires nothing and so invalidates no cache.
    conn.exec_driver_sql(
        f"CREATE TRIGGER {name} AFTER {_CACHED_TABLES[table]} ON {table}"
        " FOR EACH ROW EXECUTE FUNCTION nanoslack_bump_cache_version()"
    )


def _v4_asks(conn: Connection) -> None:
    """Version 4: ``owner_asks``; outbox rows say what they are (``purpose``, ``ask_id``,
    ``turn_id``) instead of a key prefix; ``room_notices`` gone (a notice's outbox key is
    its once-only claim)."""
    _create_tables(conn)
    have = {c["name"] for c in inspect(conn).get_columns("outbox")}
    for column, ddl in (
        ("purpose", "TEXT NOT NULL DEFAULT 'post'"),
        ("ask_id", "INTEGER"),
        ("turn_id", "INTEGER"),
        ("update_of", "TEXT"),
    ):
        if column not in have:
            conn.exec_driver_sql(f"ALTER TABLE outbox ADD COLUMN {column} {ddl}")
    # Rows written before v4 say what they are in their metadata only: replies (the
    # poster holds one to a halted room, the next turn shows an unsent one) and updates
    # waiting for the ts of the post they update.
    rows = conn.execute(
        text("SELECT id, metadata_json FROM outbox WHERE metadata_json IS NOT NULL AND purpose = 'post'")
    ).all()
    for row_id, raw in rows:
        metadata = _metadata(raw)
        payload = metadata.get("event_payload") or {}
        if metadata.get("event_type") == "nanoslack_turn":
            turn = payload.get("turn")
            conn.execute(
                text("UPDATE outbox SET purpose = 'reply', turn_id = :turn WHERE id = :id"),
                {"id": row_id, "turn": turn if isinstance(turn, int) else None},
            )
        elif isinstance(payload.get("update_of"), str):
            conn.execute(
                text("UPDATE outbox SET update_of = :key WHERE id = :id"),
                {"id": row_id, "key": payload["update_of"]},
            )
    conn.exec_driver_sql("DROP TABLE IF EXISTS room_notices")


def _v6_attempted_at(conn: Connection) -> None:
    """Version 6: ``outbox.attempted_at``, when the poster last called Slack for the row
    (written before the call), so the lookup of a post in doubt reads only what is newer."""
    _create_tables(conn)
    have = {c["name"] for c in inspect(conn).get_columns("outbox")}
    if "attempted_at" not in have:  # a fresh database has it from create_all
        conn.exec_driver_sql("ALTER TABLE outbox ADD COLUMN attempted_at REAL")


def _metadata(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _v5_steps(conn: Connection) -> None:
    """Version 5: ``turn_steps``, ``handoffs``, ``a2a_rooms``, ``rounds`` and
    ``round_members``; a message a handoff wrote says so (``messages.handoff_depth``)."""
    _create_tables(conn)
    have = {c["name"] for c in inspect(conn).get_columns("messages")}
    if "handoff_depth" not in have:
        conn.exec_driver_sql("ALTER TABLE messages ADD COLUMN handoff_depth INTEGER NOT NULL DEFAULT 0")
    if conn.dialect.name == "postgresql":
        _cache_trigger(conn, "a2a_rooms")  # the router caches a room's kind


def _v7_team(conn: Connection) -> None:
    """Version 7: team rooms' ``tasks``, ``boards``, ``votes`` and ``ballots``; an outbox row
    of a vote names it (``outbox.vote_id``)."""
    _create_tables(conn)
    have = {c["name"] for c in inspect(conn).get_columns("outbox")}
    if "vote_id" not in have:
        conn.exec_driver_sql("ALTER TABLE outbox ADD COLUMN vote_id INTEGER")


def _v8_memory(conn: Connection) -> None:
    """Version 8: an agent's own conversation (``agent_history``) and its notes
    (``memories``); a step says how much of its input came from a prompt cache
    (``turn_steps.cached_tokens``)."""
    _create_tables(conn)
    have = {c["name"] for c in inspect(conn).get_columns("turn_steps")}
    if "cached_tokens" not in have:
        conn.exec_driver_sql("ALTER TABLE turn_steps ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0")
def _v9_assistant_threads(conn: Connection) -> None:
    """Version 9: ``assistant_threads``, the channel a person views with the assistant pane
    open (``nanoslack.store.assistant``). Plain SQL, the same on SQLite and PostgreSQL."""
    conn.exec_driver_sql(
        "CREATE TABLE IF NOT EXISTS assistant_threads ("
        " instance VARCHAR NOT NULL, channel VARCHAR NOT NULL, thread_ts VARCHAR NOT NULL,"
        " user_id VARCHAR, context_channel VARCHAR, context_name VARCHAR, updated_at FLOAT NOT NULL,"
        " PRIMARY KEY (instance, channel, thread_ts))"
    )


def _v10_routines(conn: Connection) -> None:
    """Version 10: routines' ``routines`` (what the fleet read, and operators' pause and
    run-now) and ``routine_runs`` (one row per due time)."""
    _create_tables(conn)


def _v11_reply_drafts(conn: Connection) -> None:
    """Version 11: ``reply_drafts``, the stream a turn opened while its model was still
    writing (``nanoslack.store.drafts``). Plain SQL, the same on SQLite and PostgreSQL."""
    conn.exec_driver_sql(
        "CREATE TABLE IF NOT EXISTS reply_drafts ("
        " instance VARCHAR NOT NULL, turn_id INTEGER NOT NULL, channel VARCHAR NOT NULL,"
        " thread_ts VARCHAR NOT NULL, ts VARCHAR NOT NULL, started_at FLOAT NOT NULL,"
        " PRIMARY KEY (instance, turn_id))"
    )


# Each entry upgrades the schema from version i to i+1. Version 1 is the first
# release: the tables as declared in ``tables``. Version 2 adds tables (``turns``,
# ``agent_usage``, ``cache_version``, ``instance_leases``: ``create_all`` creates the
# missing ones) and, on PostgreSQL, the triggers that keep ``cache_version``. Version 3
# adds tables too (``room_halts``, ``room_notices``, ``budget_grants``). Version 4: ``_v4_asks``.
# Version 5: ``_v5_steps``. Version 6: ``_v6_attempted_at``. Version 7: ``_v7_team``.
# Version 8: ``_v8_memory``. Version 9: ``_v9_assistant_threads``. Version 10: ``_v10_routines``.
# Version 11: ``_v11_reply_drafts``.
_MIGRATIONS: list[Callable[[Connection], None]] = [
    _create_tables,
    _v2_cache_version,
    _create_tables,
    _v4_asks,
    _v5_steps,
    _v6_attempted_at,
    _v7_team,
    _v8_memory,
    _v9_assistant_threads,
    _v10_routines,
    _v11_reply_drafts,
]


def _current_version(conn: Connection) -> int:
    has_meta = conn.execute(
        text("SELECT 1 FROM sqlite_master WHERE type='table' AND name='schema_meta'")
        if conn.dialect.name == "sqlite"
        else text(
            "SELECT 1 FROM information_schema.tables"
            " WHERE table_schema = current_schema() AND table_name = 'schema_meta'"
        )
    ).first()
    if not has_meta:
        return 0
    row = conn.execute(text("SELECT value FROM schema_meta WHERE key='version'")).first()
    return int(row[0]) if row else 0


def migrate(conn: Connection) -> int:
    """Bring the schema to ``SCHEMA_VERSION``; refuse a database from the future."""
    if conn.dialect.name == "postgresql":
        # Two processes starting at once must not both create the tables. (SQLite's
        # BEGIN IMMEDIATE already serialises them.)
        conn.execute(
            text("SELECT pg_advisory_xact_lock(:space, :key)"),
            {"space": PG_LOCK_SPACE, "key": PG_LOCK_MIGRATE},
        )
    version = _current_version(conn)
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"database schema version {version} is newer than this nanoslack ({SCHEMA_VERSION}); upgrade"
        )
    while version < SCHEMA_VERSION:
        _MIGRATIONS[version](conn)
        version += 1
        conn.execute(text("DELETE FROM schema_meta WHERE key='version'"))
        conn.execute(text("INSERT INTO schema_meta (key, value) VALUES ('version', :v)"), {"v": str(version)})
    _ensure_indexes(conn)
    return version


# Indexes added without a schema version (made by every open, cheap once they exist).
# What a turn reads of its thread's outbox posts: without them each turn scanned the
# instance's whole outbox, so turns slowed as replies piled up. They repeat
# the reads' ``coalesce(thread_ts, '')``. (``messages`` gets none: its reads use the
# primary key, and every envelope's row would pay for one.)
_INDEXES = (
    "CREATE INDEX IF NOT EXISTS outbox_sent_posts"
    " ON outbox (instance, posted_channel, (coalesce(thread_ts, '')), posted_ts)",
    "CREATE INDEX IF NOT EXISTS outbox_unsent"
    " ON outbox (instance, status, channel, (coalesce(thread_ts, '')))",
)


def _ensure_indexes(conn: Connection) -> None:
    for ddl in _INDEXES:
        conn.exec_driver_sql(ddl)


_PG_PARAM = re.compile(r"(?<![:\w]):(\w+)")


@functools.lru_cache(maxsize=256)
def _pg_text(sql: str) -> str:
    """``:name`` parameters in psycopg's ``%(name)s`` style (hot statements hold no
    ``:`` inside string literals)."""
    return _PG_PARAM.sub(r"%(\1)s", sql.replace("%", "%%"))


def hot_execute(conn: Connection, stmt: TextClause, params: dict[str, Any]) -> int:
    """Run a per-message write; its rowcount.

    On SQLite the statement goes straight to the driver (sqlite3 takes the same
    ``:name`` parameters) on the transaction's own connection: SQLAlchemy's execute
    path costs ~35 µs a statement, more than a whole stage may spend on a message
    (docs/architecture.md). PostgreSQL's psycopg connection takes it the same way, once the
    parameters are respelled; other databases take the ordinary path.
    """
    name = conn.dialect.name
    if name == "sqlite":
        return int(_driver(conn).execute(stmt.text, params).rowcount)
    if name == "postgresql":
        return int(_driver(conn).execute(_pg_text(stmt.text), params).rowcount)
    return int(conn.execute(stmt, params).rowcount)


def hot_first(conn: Connection, stmt: TextClause, params: dict[str, Any]) -> tuple[Any, ...] | None:
    """``hot_execute`` for a per-message read: the first row, or None."""
    name = conn.dialect.name
    if name in ("sqlite", "postgresql"):
        sql = stmt.text if name == "sqlite" else _pg_text(stmt.text)
        row = _driver(conn).execute(sql, params).fetchone()
        return tuple(row) if row is not None else None
    result = conn.execute(stmt, params).first()
    return tuple(result) if result is not None else None


def hot_all(conn: Connection, stmt: TextClause, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """``hot_first`` for a read of several rows (a turn's thread, its pending messages)."""
    name = conn.dialect.name
    if name in ("sqlite", "postgresql"):
        sql = stmt.text if name == "sqlite" else _pg_text(stmt.text)
        return [tuple(r) for r in _driver(conn).execute(sql, params).fetchall()]
    return [tuple(r) for r in conn.execute(stmt, params).all()]


def hot_exists(conn: Connection, stmt: TextClause, params: dict[str, Any]) -> bool:
    return hot_first(conn, stmt, params) is not None


def hot_many(conn: Connection, stmt: TextClause, rows: Sequence[dict[str, Any]]) -> None:
    """``hot_execute`` for a batch's rows of one statement: one call, and on PostgreSQL
    one round trip (psycopg pipelines ``executemany``)."""
    if not rows:
        return
    name = conn.dialect.name
    if name == "sqlite":
        _driver(conn).executemany(stmt.text, rows)
    elif name == "postgresql":
        _driver(conn).cursor().executemany(_pg_text(stmt.text), rows)
    else:
        conn.execute(stmt, list(rows))


def hot_rows(conn: Connection, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """A statement with positional ``?`` parameters (a multi-row VALUES list), its rows."""
    name = conn.dialect.name
    if name == "sqlite":
        return [tuple(r) for r in _driver(conn).execute(sql, params).fetchall()]
    if name == "postgresql":
        return [tuple(r) for r in _driver(conn).execute(_pg_positional(sql), params).fetchall()]
    raise StoreError(f"positional statements are not supported on {name}")


@functools.lru_cache(maxsize=64)
def _pg_positional(sql: str) -> str:
    return sql.replace("%", "%%").replace("?", "%s")


_CACHE_VERSION = text("SELECT version FROM cache_version WHERE id = 1")


class Transaction:
    """``with db.transaction() as conn``: a plain class, not a generator-based
    context manager, because the hot path enters one several times per message."""

    __slots__ = ("_db", "_root")

    def __init__(self, db: Database) -> None:
        self._db = db
        self._root: RootTransaction | None = None

    def __enter__(self) -> Connection:
        db = self._db
        db._lock.acquire()
        if db._depth:
            db._depth += 1
            return db._conn
        try:
            self._root = db._conn.begin()
        except BaseException:
            db._lock.release()
            raise
        db._depth = 1
        db._txn_serial += 1
        return db._conn

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        db = self._db
        root = self._root
        if root is None:
            db._depth -= 1
            db._lock.release()
            return
        callbacks, db._after_commit = db._after_commit, []
        try:
            db._depth = 0
            if exc_type is not None:
                db._rollback(root)
                return
            try:
                root.commit()
            except BaseException:
                # Even when the failed commit left it inactive: until it is rolled back
                # the connection refuses every later begin() (a PostgreSQL session cut
                # off at its commit would wedge the process for good).
                db._rollback(root)
                raise
        finally:
            db._lock.release()
        # Committed: what waits for this transaction's writes may look now.
        for callback in callbacks:
            callback()


class Database:
    """The connection and its transaction discipline, shared by every repository."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self._lock = threading.RLock()
        self._conn = self.engine.connect()
        self._depth = 0
        self._txn_serial = 0
        self._version_serial = -1
        self._version = 0
        self._savepoints = 0
        self._rollback_listeners: list[Callable[[], None]] = []
        self._after_commit: list[Callable[[], None]] = []
        event.listen(self.engine, "rollback", lambda *_: self._rolled_back())
        with self.transaction() as conn:
            migrate(conn)

    @property
    def is_sqlite(self) -> bool:
        return self.engine.dialect.name == "sqlite"

    def transaction(self) -> Transaction:
        """One atomic unit; nested calls join the outer transaction."""
        return Transaction(self)

    def external_version(self) -> int:
        """Inside a transaction: a number that changes when another connection
        (an operator's ``q.py``, another fleet) committed since we last looked.

        Read once per transaction: while we hold SQLite's write lock (BEGIN
        IMMEDIATE) nobody else can commit, so the value cannot move under us, and
        the router and the gate ask for it on every message. Elsewhere it is the
        ``cache_version`` row that triggers bump on every write to a cached table
        (ours included, which costs one extra cache refresh): read at the start of
        the transaction, it is never newer than the rows read after it.
        """
        if not self._depth:
            raise StoreError("external_version() needs an open transaction")
        if self._version_serial != self._txn_serial:
            self._version = self._read_version()
            self._version_serial = self._txn_serial
        return self._version

    def _read_version(self) -> int:
        if self.is_sqlite:
            return int(_driver(self._conn).execute("PRAGMA data_version").fetchone()[0])
        row = self._conn.execute(_CACHE_VERSION).first()
        return int(row[0]) if row else 0

    @contextmanager
    def savepoint(self) -> Iterator[Connection]:
        """Inside a transaction: a unit that fails alone (one message of a batch).

        Raw SAVEPOINT statements on SQLite, for the same reason as ``hot_execute``.
        """
        with self._lock:
            if not self._depth:
                raise StoreError("savepoint() needs an open transaction")
            self._savepoints += 1
            name = f"sp{self._savepoints}"
            run = self._raw_or_sa()
            run(f"SAVEPOINT {name}")
            try:
                yield self._conn
            except BaseException:
                run(f"ROLLBACK TO SAVEPOINT {name}")
                run(f"RELEASE SAVEPOINT {name}")
                self._rolled_back()
                raise
            else:
                run(f"RELEASE SAVEPOINT {name}")
            finally:
                self._savepoints -= 1

    def _rollback(self, root: RootTransaction) -> None:
        """Undo a transaction whose body or commit failed, without hiding why it failed.

        When the connection itself is gone (a PostgreSQL restart, ``pg_terminate_backend``,
        an error on the raw driver path that SQLAlchemy never saw) the rollback fails
        too: the connection is then invalidated, and the next transaction opens a
        fresh one (``pool_pre_ping`` checks it) instead of failing on the dead one.
        """
        try:
            root.rollback()
        except Exception:
            with contextlib.suppress(Exception):
                self._conn.invalidate()
            if self._conn.get_transaction() is root:
                with contextlib.suppress(Exception):
                    root.rollback()  # on the invalidated connection: only closes the transaction
            self._rolled_back()  # the listener SQLAlchemy would have called

    def _raw_or_sa(self) -> Callable[[str], object]:
        if self.is_sqlite:
            run: Callable[[str], object] = _driver(self._conn).execute
            return run
        return self._conn.exec_driver_sql

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the current transaction has committed (at once outside
        one); never when it rolls back. Registering the same callback twice in one
        transaction runs it once: it says "something changed", not what."""
        with self._lock:
            if not self._depth:
                pending = True
            else:
                pending = False
                if callback not in self._after_commit:
                    self._after_commit.append(callback)
        if pending:
            callback()

    def on_rollback(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` whenever work is undone (a transaction or a savepoint),
        so in-process caches never keep what the database forgot."""
        self._rollback_listeners.append(listener)

    def _rolled_back(self) -> None:
        for listener in self._rollback_listeners:
            listener()

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            self.engine.dispose()
