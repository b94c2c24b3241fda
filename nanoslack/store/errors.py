"""What a store failure means: a bug or a constraint (``StoreError``), or "not now"
(``StoreUnavailable``), which the same work tried again once the store answers gets past."""

from __future__ import annotations

import sqlite3

import psycopg
from sqlalchemy import exc as sa_exc


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
