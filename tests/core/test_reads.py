"""A read of one statement (``Database.read``): on SQLite it takes no transaction of its
own, so it never waits for another connection's write lock; inside a transaction it
sees that transaction's writes; a body on SQLAlchemy's own path leaves nothing open."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from nanoslack.inbound import Inbound
from nanoslack.store import Store, sqlite_url
from tests.core.core_helpers import message


@pytest.fixture
def file_store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(sqlite_url(str(tmp_path / "fleet.db"))) as store:
        yield store


def _pending(store: Store, msg: Inbound) -> None:
    with store.transaction():
        store.messages.add(msg, group_id=None, status="pending")


def test_a_read_answers_at_once_while_an_operator_holds_the_write_lock(
    file_store: Store, tmp_path: Path
) -> None:
    msg = message(ts="1700000000.000100")
    _pending(file_store, msg)
    operator = sqlite3.connect(tmp_path / "fleet.db", isolation_level=None)
    operator.execute("BEGIN IMMEDIATE")  # q.py in the middle of an UPDATE, say
    operator.execute("UPDATE messages SET text = 'edited'")
    try:
        began = time.monotonic()
        assert file_store.messages.has_pending(msg.instance, msg.channel, msg.thread_key)
        # A read in a BEGIN IMMEDIATE of its own waited for the whole busy timeout (5 s), then failed.
        assert time.monotonic() - began < 2.5
        # What the operator has not committed is not read.
        assert [m.text for m in file_store.messages.thread(msg.instance, msg.channel, msg.thread_key)] == [
            msg.text
        ]
    finally:
        operator.execute("ROLLBACK")
        operator.close()


def test_a_read_inside_a_transaction_sees_what_that_transaction_wrote(store: Store) -> None:
    msg = message(ts="1700000000.000200")
    with store.transaction():
        store.messages.add(msg, group_id=None, status="pending")
        assert store.messages.has_pending(msg.instance, msg.channel, msg.thread_key)
    assert store.messages.has_pending(msg.instance, msg.channel, msg.thread_key)


def test_a_read_on_sqlalchemys_own_path_leaves_no_transaction_open(file_store: Store, tmp_path: Path) -> None:
    with file_store.db.read() as conn:
        assert conn.execute(text("SELECT count(*) FROM messages")).scalar_one() == 0
    # Nothing of the read's holds a lock: another process writes at once.
    other = sqlite3.connect(tmp_path / "fleet.db", isolation_level=None, timeout=0.1)
    other.execute("BEGIN IMMEDIATE")
    other.execute("ROLLBACK")
    other.close()
    assert not file_store.db.driver().in_transaction


def test_reads_from_two_threads_wait_for_each_other_not_for_a_transaction(file_store: Store) -> None:
    msg = message(ts="1700000000.000300")
    _pending(file_store, msg)
    seen: list[bool] = []

    def read_many() -> None:
        for _ in range(200):
            seen.append(file_store.messages.has_pending(msg.instance, msg.channel, msg.thread_key))

    threads = [threading.Thread(target=read_many) for _ in range(2)]
    for t in threads:
        t.start()
    with file_store.transaction():  # a writer in this thread meanwhile
        file_store.messages.add(message(ts="1700000000.000301"), group_id=None, status="pending")
    for t in threads:
        t.join()
    assert seen == [True] * 400
