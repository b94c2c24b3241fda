"""SQLite's WAL checkpoints on a thread of their own (docs/architecture.md, *Acks never
wait behind agent work*): the store's commits stop copying pages into the database
file, the WAL stays small all the same, and a commit is as durable as before."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from nanoslack.store import Store, sqlite_url
from nanoslack.store.checkpoint import Checkpointer
from tests.core.core_helpers import until

PAGE = 4096
BURSTS, PAGES_A_BURST = 20, 100


@pytest.fixture
def file_store(tmp_path: Path) -> Iterator[Store]:
    store = Store.open(sqlite_url(str(tmp_path / "fleet.db")))
    store.db.driver().execute("CREATE TABLE blobs (b BLOB)")
    yield store
    store.close()


def _write_pages(store: Store, pages: int) -> None:
    with store.transaction():
        store.db.driver().execute("INSERT INTO blobs VALUES (randomblob(?))", (pages * PAGE,))


def _autocheckpoint(store: Store) -> int:
    return int(store.db.driver().execute("PRAGMA wal_autocheckpoint").fetchone()[0])


def test_while_checkpoints_run_the_stores_commits_leave_the_copying_to_them_and_the_wal_stays_small(
    file_store: Store, tmp_path: Path
) -> None:
    wal = tmp_path / "fleet.db-wal"
    checkpoints = Checkpointer(file_store.db, interval=0.02)
    checkpoints.start()
    assert _autocheckpoint(file_store) == 0  # no commit of the store's copies pages any more
    largest = 0
    for _ in range(BURSTS):
        passes = checkpoints.passes
        _write_pages(file_store, PAGES_A_BURST)
        largest = max(largest, wal.stat().st_size)
        # A quiet moment after each burst, as between the fleet's batches: a pass copies it.
        until(lambda passes=passes: checkpoints.passes >= passes + 2)
    checkpoints.stop()
    # Without the thread (and no automatic checkpoints) the WAL would hold all 20 bursts.
    assert largest < 3 * PAGES_A_BURST * PAGE


def _wal_restarts(wal: Path) -> int:
    """The WAL header's checkpoint sequence number: it moves each time the file starts again."""
    with wal.open("rb") as f:
        return int.from_bytes(f.read(16)[12:16], "big")


def test_a_steady_stream_of_commits_without_a_quiet_moment_still_starts_the_wal_again(
    file_store: Store, tmp_path: Path
) -> None:
    wal = tmp_path / "fleet.db-wal"
    _write_pages(file_store, 1)
    first = _wal_restarts(wal)
    checkpoints = Checkpointer(file_store.db, interval=0.01, restart_at=50)
    checkpoints.start()
    deadline = time.monotonic() + 20
    # No pause between commits: no PASSIVE pass ends before the next commit begins, so
    # only the pass under the store's lock lets the file start again.
    while _wal_restarts(wal) < first + 3:
        assert time.monotonic() < deadline, "the WAL never started again"
        _write_pages(file_store, 5)
    checkpoints.stop()


def test_stopping_checkpoints_gives_the_store_its_automatic_checkpoints_back(file_store: Store) -> None:
    file_store.checkpoints.start()
    file_store.checkpoints.stop()
    assert not file_store.checkpoints.running
    assert _autocheckpoint(file_store) == 1000  # SQLite's own default
    _write_pages(file_store, 10)  # and the store still writes


@pytest.mark.parametrize("where", ["postgresql", "sqlite in memory"])
def test_checkpoints_do_nothing_where_there_is_no_wal_file(
    where: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("pg_url") if where == "postgresql" else "sqlite://"
    with Store.open(url) as store:
        store.checkpoints.start()
        assert not store.checkpoints.running
        with store.transaction() as conn:
            conn.exec_driver_sql("SELECT 1")


_WRITER = """
import sys
from nanoslack.store import Store, sqlite_url
from nanoslack.store.checkpoint import Checkpointer
from tests.core.core_helpers import until
store = Store.open(sqlite_url(sys.argv[1]))
store.checkpoints.start()
drv = store.db.driver()
drv.execute("CREATE TABLE IF NOT EXISTS blobs (n INTEGER, b BLOB)")
n = 0
while True:
    n += 1
    with store.transaction():
        drv.execute("INSERT INTO blobs VALUES (?, randomblob(20000))", (n,))
    print(n, flush=True)
"""


def test_every_commit_survives_a_kill_while_checkpoints_run_on_their_thread(tmp_path: Path) -> None:
    path = tmp_path / "fleet.db"
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    child = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert child.stdout is not None
    committed = 0
    # Past several checkpoints (≈ 5 pages a commit): a kill lands while the thread copies.
    while committed < 3000:
        line = child.stdout.readline()
        assert line, "the writer stopped by itself"
        committed = int(line)
    child.send_signal(signal.SIGKILL)
    child.wait()
    with Store.open(sqlite_url(str(path))) as store:
        rows = store.db.driver().execute("SELECT count(*), max(n) FROM blobs").fetchone()
        assert store.db.driver().execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert rows[0] == rows[1] >= committed


def test_a_checkpoint_error_is_logged_once_while_it_lasts(file_store: Store, tmp_path: Path) -> None:
    checkpoints = Checkpointer(file_store.db)
    broken = sqlite3.connect(tmp_path / "fleet.db")
    broken.close()  # every pass on it fails, as on a full disk
    working = sqlite3.connect(tmp_path / "fleet.db", isolation_level=None)
    with structlog.testing.capture_logs() as logs:
        for _ in range(4):
            checkpoints._round(broken)
        checkpoints._round(working)  # it recovers: the next failure is news again
        checkpoints._round(broken)
    working.close()
    assert [entry["event"] for entry in logs] == ["wal checkpoint failed"] * 2
