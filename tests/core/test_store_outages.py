"""The store survives its database (docs/operations.md), at the level of one instance's core:
a deadlock between two processes' batches is retried, a session cut off at its commit
does not wedge the connection, and the errors that mean "not now" are told from bugs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
import structlog
from sqlalchemy import event, text

from nanoslack.config import load_settings
from nanoslack.core import EdgeParts, FleetCore, InstanceCore, Observers
from nanoslack.inbound import Identity, Inbound
from nanoslack.pipeline import Outcome
from nanoslack.store import Store, StoreUnavailable, sqlite_url, store_unavailable
from nanoslack.testing.fleet_env import SILENT_AGENT
from nanoslack.testing.pg import PgServer
from tests.core.core_helpers import BOT_USER, INSTANCE, bot_message, until

IDENTITY = Identity(instance=INSTANCE, team_id="T0TEAM", bot_user_id=BOT_USER, bot_id="B0DANA")
R1, R2 = "C0ROOMONE", "C0ROOMTWO"


class Directory:
    """What the Slack edge would say about people (``core.Directory``): nothing needed here."""

    async def ensure_many(self, msgs: Any) -> None:
        return None

    async def member_names(self, channel: str) -> tuple[str, ...]:
        return ()

    def name_of_user(self, slack_user_id: str) -> str | None:
        return None


def _core(tmp_path: Path, url: str, observers: Observers | None = None) -> tuple[FleetCore, InstanceCore]:
    env = tmp_path / ".env"
    values = {
        "DATABASE_URL": url,
        "SLACK_INSTANCES": INSTANCE,
        "SLACK_BOT_TOKEN_DANA": "xoxb-test",
        "SLACK_APP_TOKEN_DANA": "xapp-test",
        "SLACK_A2A_ROOMS": f"{R1},{R2}",
        "SLACK_A2A_HOP_SCOPE": "room",
        "NANOSLACK_TEAMMATES": str(tmp_path / "teammates"),
        **SILENT_AGENT,
    }
    env.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    settings = load_settings(env, environ={})
    fleet = FleetCore(settings, Store.open(url), siblings=dict, observers=observers)
    agent = fleet.agent_for(INSTANCE)
    assert agent is not None
    return fleet, fleet.instance(IDENTITY, agent, EdgeParts(directory=Directory()))


def _bot_message(channel: str) -> Inbound:
    return dataclasses.replace(bot_message(mention=True, channel=channel), sender_id="")


def _waiting_for_a_lock(url: str) -> bool:
    with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        ).fetchone()
    return bool(row and row[0])


def _other_process_locks_r2_then_r1(url: str, done: threading.Event, errors: list[BaseException]) -> None:
    """Another process's batch: room two's hop first, then, once our batch holds room one
    and waits for room two, room one's. Its deadlock check waits longer than ours, so
    PostgreSQL picks our transaction as the victim, every time."""
    other = Store.open(url)
    try:
        with other.transaction() as conn:
            conn.execute(text("SET LOCAL deadlock_timeout = '10s'"))
            other.hops.reserve(
                room=R2, instance="eli", ts="1700000001.000001", bot_id="B0X", max_hops=6, scope="room"
            )
            deadline = time.monotonic() + 10
            while not _waiting_for_a_lock(url):
                if time.monotonic() > deadline:
                    raise TimeoutError("our batch never waited for room two")
                time.sleep(0.01)
            other.hops.reserve(
                room=R1, instance="eli", ts="1700000001.000002", bot_id="B0X", max_hops=6, scope="room"
            )
    except BaseException as exc:
        errors.append(exc)
    finally:
        other.close()
        done.set()


async def test_a_deadlock_with_another_process_locking_rooms_in_the_opposite_order_is_retried(
    pg_url: str, tmp_path: Path
) -> None:
    fleet, core = _core(tmp_path, pg_url)
    first, second = _bot_message(R1), _bot_message(R2)
    done, errors = threading.Event(), []
    other = threading.Thread(target=_other_process_locks_r2_then_r1, args=(pg_url, done, errors))
    other.start()
    await asyncio.to_thread(lambda: until(lambda: _holds_a_lock(pg_url)))
    with structlog.testing.capture_logs() as logs:
        await core.start()
        assert core.inbox.take([first, second]) == [True, True]  # one batch: room one's lock, then room two's
        await asyncio.to_thread(done.wait, 30)
        await _until_async(lambda: all(fleet.store.inbox.status(m.key) == "done" for m in (first, second)))
        await core.stop()
    other.join(10)
    assert not errors, errors
    retried = [e for e in logs if e["event"] == "store transaction retried"]
    assert retried and "deadlock" in retried[0]["reason"]
    with fleet.store.transaction() as conn:
        rows = conn.execute(text("SELECT status, attempts FROM inbox ORDER BY ts")).all()
    assert [tuple(r) for r in rows] == [("done", 0), ("done", 0)], "a deadlock counted as a failure"
    assert not [e for e in logs if e["event"] in ("downstream failed", "pipeline crashed")]
    # Both batches' hops are there: each room holds ours and the other process's.
    assert fleet.store.hops.room_count(R1) == 2 and fleet.store.hops.room_count(R2) == 2
    await fleet.close()
    fleet.store.close()


def _holds_a_lock(url: str) -> bool:
    with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted").fetchone()
    return bool(row and row[0])


async def _until_async(check: Callable[[], bool], within: float = 10) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.02)


def test_a_postgresql_session_cut_off_at_its_commit_leaves_the_next_transaction_working(
    pg_server: PgServer, pg_url: str
) -> None:
    """The connection used to stay wedged ("can't call begin() here") after a commit
    that failed: the process had to be restarted."""
    with Store.open(pg_url) as store:
        with pytest.raises(Exception) as cut, store.transaction() as conn:
            conn.execute(text("SELECT 1"))
            assert pg_server.terminate_backends(pg_url) == 1
        assert store_unavailable(cut.value) is not None
        msg = _bot_message(R1)
        assert store.inbox.record(msg) is True
        assert store.inbox.status(msg.key) == "received"


def test_a_rollback_that_fails_leaves_the_next_transaction_working(store: Store) -> None:
    """A rollback can fail in ways SQLAlchemy does not take for a lost connection (here
    an error raised as it rolls back, as from a network fault): the connection is then
    thrown away, or every later transaction fails ("cannot start a transaction within
    a transaction") and the process never recovers by itself."""
    failing = [True]

    def rollback_fails(_conn: object) -> None:
        if failing[0]:
            raise OSError("the rollback was lost")

    event.listen(store.db.engine, "rollback", rollback_fails)
    try:
        with pytest.raises(ValueError), store.transaction() as conn:
            conn.execute(text("SELECT 1"))
            raise ValueError("the transaction's body failed")
        failing[0] = False
        msg = _bot_message(R1)
        assert store.inbox.record(msg) is True
        assert store.inbox.status(msg.key) == "received"
    finally:
        event.remove(store.db.engine, "rollback", rollback_fails)


def test_a_transaction_whose_rollback_fails_leaves_none_of_its_writes_behind(store: Store) -> None:
    """The failed transaction's work must go with it: on PostgreSQL a connection kept
    after its rollback failed is still inside that transaction, and the next one would
    carry on in it and commit its writes (a message recorded by a batch that failed)."""
    failing = [True]

    def rollback_fails(_conn: object) -> None:
        if failing[0]:
            raise OSError("the rollback was lost")

    lost, kept = _bot_message(R1), _bot_message(R2)
    event.listen(store.db.engine, "rollback", rollback_fails)
    try:
        with pytest.raises(ValueError), store.transaction():
            assert store.inbox.record(lost) is True
            raise ValueError("the transaction's body failed")
        failing[0] = False
        assert store.inbox.record(kept) is True
        assert store.inbox.status(lost.key) is None
        assert store.inbox.status(kept.key) == "received"
    finally:
        event.remove(store.db.engine, "rollback", rollback_fails)


def test_errors_that_mean_not_now_are_told_from_errors_that_mean_wrong(tmp_path: Path) -> None:
    url = sqlite_url(str(tmp_path / "s.db"))
    with Store.open(url) as store:
        raw = store.db.driver()  # a per-connection fault
        raw.execute(f"PRAGMA max_page_count = {raw.execute('PRAGMA page_count').fetchone()[0]}")
        full = _error(lambda: [store.inbox.record(_bot_message(R1)) for _ in range(200)])
        raw.execute("PRAGMA max_page_count = 1073741823")
        raw.execute("PRAGMA query_only = ON")
        read_only = _error(lambda: store.inbox.record(_bot_message(R1)))
        raw.execute("PRAGMA query_only = OFF")

        def bad_sql_statement() -> None:
            with store.transaction() as conn:
                conn.exec_driver_sql("SELEC 1")

        bad_sql = _error(bad_sql_statement)
    assert "disk is full" in _reason(full)
    assert "readonly" in _reason(read_only)
    assert store_unavailable(bad_sql) is None
    assert store_unavailable(ValueError("not the store")) is None
    deadlock = StoreUnavailable("deadlock detected", deadlock=True)
    assert store_unavailable(RuntimeError("wrapped")) is None
    try:
        raise RuntimeError("while retrying") from deadlock
    except RuntimeError as chained:
        assert store_unavailable(chained) is deadlock


def _error(call: Callable[[], object]) -> BaseException:
    try:
        call()
    except Exception as exc:
        return exc
    raise AssertionError("no error")


def _reason(error: BaseException) -> str:
    found = store_unavailable(error)
    assert found is not None, error
    return found.reason


async def test_a_message_handed_in_again_after_a_write_that_was_retried_is_processed_once(
    tmp_path: Path,
) -> None:
    """A write cut off at its commit may have committed: tried again, its events come
    back as duplicates, and the inbox queues them to be checked (``take``'s ``retried``).
    Checked, a message already processed, or queued before, is not processed again."""
    seen: list[tuple[str, Outcome]] = []
    fleet, core = _core(
        tmp_path,
        sqlite_url(str(tmp_path / "s.db")),
        Observers(on_outcome=lambda m, o: seen.append((m.ts, o))),
    )
    first, second = _bot_message(R1), _bot_message(R1)
    await core.start()
    # The first attempt: committed, its answer lost (nothing queued, no ack).
    assert fleet.store.inbox.record_many([first, second]) == [True, True]
    # Tried again with a copy of the first: all "duplicates", checked; the copy is left out.
    assert core.inbox.take([first, first], retried=True) == [False, False]
    await _until_async(lambda: fleet.store.inbox.status(first.key) == "done")
    # Slack's redelivery after a lost ack, also retried: the first is processed already
    # (left out), the second was recorded, never handed in: processed.
    assert core.inbox.take([first, second], retried=True) == [False, False]
    await core.stop()
    assert [ts for ts, _ in seen] == [first.ts, second.ts]
    assert fleet.store.inbox.status(second.key) == "done"
    await fleet.close()
    fleet.store.close()
