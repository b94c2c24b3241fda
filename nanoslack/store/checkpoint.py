"""SQLite's WAL checkpoints on a thread of their own, off the fleet's loop.

Left to itself SQLite checkpoints inside the commit that takes the WAL past 1,000
pages: that commit copies the pages into the database file and waits for two fsyncs,
on the one loop every socket's acks also run on (docs/architecture.md, *Acks never wait
behind agent work*). While a ``Checkpointer`` runs, the store's connection never
checkpoints (``wal_autocheckpoint=0``) and a thread with a connection of its own runs a
PASSIVE checkpoint every ``interval`` seconds. PASSIVE never waits for a lock and never blocks the writer;
sqlite3 lets go of the GIL while it copies and syncs. A commit is as durable as before
(``synchronous=NORMAL``: in the WAL, across a process crash); only where its pages go
next has moved.

PostgreSQL and ``:memory:`` databases have no WAL file to checkpoint: ``start`` does
nothing for them.
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

from sqlalchemy import event

from nanoslack.logs import get_logger
from nanoslack.store.database import Database

log = get_logger(__name__)

# A pass copies every page committed before it (a reader's snapshot aside), so the WAL
# holds about a quarter of a second of writes: at the fleet's top rate, fewer pages than
# SQLite's own 1,000-page trigger.
CHECKPOINT_INTERVAL_S = 0.25
_SQLITE_DEFAULT_AUTOCHECKPOINT = 1000


class Checkpointer:
    def __init__(self, db: Database, *, interval: float = CHECKPOINT_INTERVAL_S) -> None:
        self._db = db
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0  # checkpoints run (tests and benches read it)

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        path = self._db.sqlite_file()
        if path is None or self._thread is not None:
            return
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=5.0)
        # The checkpoint's fsyncs follow the connection that runs it: the store's setting.
        conn.execute("PRAGMA synchronous=NORMAL")
        self._stop.clear()
        self._set_autocheckpoint(0)
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
                self._checkpoint(conn)
        finally:
            conn.close()

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as exc:
            log.warning("wal checkpoint failed", error=str(exc))
            return
        self.passes += 1
