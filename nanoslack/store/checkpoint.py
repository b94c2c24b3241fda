"""SQLite's WAL checkpoints on a thread of their own, off the fleet's loop.

Left to itself SQLite checkpoints inside the commit that takes the WAL past 1,000
pages: that commit copies the pages into the database file and waits for two fsyncs,
on the one loop every socket's acks also run on (docs/architecture.md, *Acks never wait
behind agent work*). While a ``Checkpointer`` runs, the store's connection never
checkpoints (``wal_autocheckpoint=0``) and a thread with a connection of its own runs a
PASSIVE checkpoint every ``interval`` seconds: it never waits for a lock and never blocks
the writer, and sqlite3 lets go of the GIL while it copies and syncs.

A PASSIVE pass alone cannot keep the WAL small under a steady stream of commits: the file
starts again from its beginning only at the first commit after a pass that copied
everything, and the fleet commits again before a pass is over. So once the WAL holds
``restart_at`` pages, the thread runs a second pass (what came in during the first) and
then a last one holding the store's lock, so that no commit of the store's comes between
it and the WAL's restart. The loop waits for that last, short pass only: a few pages and
its fsyncs, where a commit of SQLite's own choosing copies a thousand.

A commit is as durable as before (``synchronous=NORMAL``: in the WAL, across a process
crash); only where its pages go next has moved. PostgreSQL and ``:memory:`` databases have
no WAL file: ``start`` does nothing for them.
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

from sqlalchemy import event

from nanoslack.logs import get_logger
from nanoslack.store.database import Database

log = get_logger(__name__)

CHECKPOINT_INTERVAL_S = 0.25
# SQLite's own trigger (wal_autocheckpoint), and what the store's connection gets back.
_SQLITE_DEFAULT_AUTOCHECKPOINT = 1000
RESTART_AT_PAGES = _SQLITE_DEFAULT_AUTOCHECKPOINT


class Checkpointer:
    def __init__(
        self, db: Database, *, interval: float = CHECKPOINT_INTERVAL_S, restart_at: int = RESTART_AT_PAGES
    ) -> None:
        self._db = db
        self._interval = interval
        self._restart_at = restart_at
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0  # checkpoint passes run (tests and benches read it)
        self._failing: str | None = None  # the error last logged, until a pass succeeds
        self.restarts = 0  # of them, the ones under the store's lock

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        path = self._db.sqlite_file()
        if path is None or self._thread is not None:
            return
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=5.0)
        try:
            # The checkpoint's fsyncs follow the connection that runs it: the store's setting.
            conn.execute("PRAGMA synchronous=NORMAL")
            self._set_autocheckpoint(0)
        except BaseException:
            conn.close()  # no thread to own it
            raise
        self._stop.clear()
        event.listen(self._db.engine, "connect", self._on_connect)
        self._thread = threading.Thread(target=self._run, args=(conn,), name="sqlite-checkpoint", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (after its pass under way) and give the store's connection its
        automatic checkpoints back."""
        thread = self._thread
        if thread is None:
            return
        self._stop.set()
        thread.join()
        self._thread = None
        event.remove(self._db.engine, "connect", self._on_connect)
        self._set_autocheckpoint(_SQLITE_DEFAULT_AUTOCHECKPOINT)

    def _set_autocheckpoint(self, pages: int) -> None:
        with self._db.transaction():
            self._db.driver().execute(f"PRAGMA wal_autocheckpoint={int(pages)}")

    def _on_connect(self, dbapi_conn: Any, _record: Any) -> None:
        # A connection opened again after an invalidation: same rule as the first.
        dbapi_conn.execute("PRAGMA wal_autocheckpoint=0")

    def _run(self, conn: sqlite3.Connection) -> None:
        try:
            while not self._stop.wait(self._interval):
                self._round(conn)
        finally:
            conn.close()

    def _round(self, conn: sqlite3.Connection) -> None:
        pages = self._checkpoint(conn)
        if pages is None or pages < self._restart_at:
            return
        self._checkpoint(conn)
        with self._db.no_transactions():
            self._checkpoint(conn)
            self.restarts += 1

    def _checkpoint(self, conn: sqlite3.Connection) -> int | None:
        """One PASSIVE pass: the WAL's pages when it began, or None when it failed."""
        try:
            _busy, pages, _copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as exc:
            # Once per error, not four times a second while it lasts (a full disk, say).
            if str(exc) != self._failing:
                self._failing = str(exc)
                log.warning("wal checkpoint failed", error=self._failing)
            return None
        self._failing = None
        self.passes += 1
        return int(pages)
