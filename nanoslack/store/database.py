"""The connection and its transaction discipline, shared by every repository.

One ``Database`` per process holds one SQLAlchemy connection: the fleet runs on one
asyncio loop, and SQLite serialises writers anyway, so a pool would only add
checkout cost on the hot path. A re-entrant lock keeps the odd call from another
thread (tests, CLI helpers) safe.

PostgreSQL (docs/operations.md) runs the same SQL at READ COMMITTED: what SQLite's single
writer gives for free is spelled out there as an advisory lock per room (hops), a
lock around migrations, and the ``cache_version`` row kept by triggers.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, RootTransaction, event, text

from nanoslack.store.engine import driver, make_engine
from nanoslack.store.errors import StoreError
from nanoslack.store.migrations import migrate

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
        db._owner = threading.get_ident()
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
            db._owner = None
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


class _Shared:
    """A context manager without state of its own: one object per database serves every
    call (the hot path enters several per message)."""

    __slots__ = ("_db",)

    def __init__(self, db: Database) -> None:
        self._db = db


class JoinedTransaction(_Shared):
    """A nested ``transaction()`` in the thread that holds the outer one: it only joins
    (the lock taken once more, the depth counted)."""

    __slots__ = ()

    def __enter__(self) -> Connection:
        db = self._db
        db._lock.acquire()
        db._depth += 1
        return db._conn

    def __exit__(self, *_: object) -> None:
        db = self._db
        db._depth -= 1
        db._lock.release()


class Read(_Shared):
    """``with db.read() as conn`` on SQLite outside a transaction: the store's lock, and no
    BEGIN. Each statement is then a transaction of SQLite's own, reading one committed
    state, and none takes the write lock: a read of one statement in its own BEGIN
    IMMEDIATE cost five times the statement (docs/architecture.md). A body that goes
    through SQLAlchemy's own path makes it begin a transaction: that one ends here."""

    __slots__ = ()

    def __enter__(self) -> Connection:
        db = self._db
        db._lock.acquire()
        return db._conn

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        db = self._db
        try:
            if db._conn.in_transaction():
                if exc_type is None:
                    db._conn.commit()
                else:
                    db._conn.rollback()
        finally:
            db._lock.release()


class Database:
    """The connection and its transaction discipline, shared by every repository."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self._lock = threading.RLock()
        self._conn = self.engine.connect()
        self._depth = 0
        # The thread whose transaction is open (set while ``_depth`` > 0).
        self._owner: int | None = None
        self._joined = JoinedTransaction(self)
        self._read = Read(self)
        self._sqlite = self.engine.dialect.name == "sqlite"
        self._txn_serial = 0
        self._version_serial = -1
        self._version = 0
        self._savepoints = 0
        self._rollback_listeners: list[Callable[[], None]] = []
        self._after_commit: list[Callable[[], None]] = []
        event.listen(self.engine, "rollback", lambda *_: self._rolled_back())
        with self.transaction() as conn:
            migrate(conn)

    def driver(self) -> Any:
        """The DB-API connection under the store's own (for a fault a test injects, or
        rows a bench writes in bulk)."""
        return driver(self._conn)

    @property
    def is_sqlite(self) -> bool:
        return self._sqlite

    def sqlite_file(self) -> str | None:
        """The database file's path, when it is SQLite on a file (not ``:memory:``)."""
        if not self.is_sqlite:
            return None
        database = self.engine.url.database
        if not database or database == ":memory:" or database.startswith("file:"):
            return None
        return database

    def transaction(self) -> Transaction | JoinedTransaction:
        """One atomic unit; nested calls join the outer transaction."""
        if self._depth and self._owner == threading.get_ident():
            # Read without the lock: only this thread sets or clears its own ident there.
            return self._joined
        return Transaction(self)

    def read(self) -> Transaction | JoinedTransaction | Read:
        """A read of one statement (a statement per call, each its own snapshot): on
        SQLite outside a transaction, without one of ours (``Read``); inside one, it
        joins; on PostgreSQL, a transaction as any other."""
        if self._depth and self._owner == threading.get_ident():
            return self._joined
        if self._sqlite:
            return self._read
        return Transaction(self)

    @contextmanager
    def no_transactions(self) -> Iterator[None]:
        """While it lasts no transaction of this database's runs (they wait for the lock):
        for another connection's short piece of work that must not interleave with them."""
        with self._lock:
            yield

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
            return int(driver(self._conn).execute("PRAGMA data_version").fetchone()[0])
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
            run: Callable[[str], object] = driver(self._conn).execute
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


class Cached:
    """A repository whose rows the router and the gate cache (``Store.cache_version``):
    ``generation`` moves on each of its writes (``_bump``) and on every rollback, so a
    rolled-back create never survives in anyone's cache."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self.generation = 0
        db.on_rollback(self._bump)

    def _bump(self, *_: object) -> None:
        self.generation += 1
