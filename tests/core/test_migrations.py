"""Upgrading a store an earlier release wrote: what its rows were is kept."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from nanoslack.store import SCHEMA_VERSION, Store, sqlite_url

# The outbox as schema version 3 had it: what a row was lived in its metadata.
V3_OUTBOX = """
CREATE TABLE outbox (
  id INTEGER PRIMARY KEY, instance TEXT NOT NULL, dedupe_key TEXT NOT NULL UNIQUE,
  kind TEXT NOT NULL, channel TEXT, dm_user TEXT, thread_ts TEXT, update_ts TEXT,
  text TEXT NOT NULL, blocks TEXT, metadata_json TEXT, status TEXT NOT NULL,
  attempts INTEGER NOT NULL, error TEXT, posted_channel TEXT, posted_ts TEXT,
  created_at FLOAT NOT NULL, sent_at FLOAT
)
"""


def _v3_database(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE schema_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "INSERT INTO schema_meta VALUES ('version', '3');"
        + V3_OUTBOX
        + ";CREATE TABLE room_notices (room TEXT, kind TEXT, epoch TEXT, instance TEXT, created_at FLOAT,"
        " PRIMARY KEY (room, kind, epoch));"
    )
    rows = [
        ("turn:dana:7:0", "post", json.dumps({"event_type": "nanoslack_turn", "event_payload": {"turn": 7}})),
        ("approval:3", "post", json.dumps({"event_type": "nanoslack_approval", "event_payload": {}})),
        (
            "approval:3:approved:1",
            "update",
            json.dumps({"event_type": "nanoslack_update", "event_payload": {"update_of": "approval:3"}}),
        ),
        ("pause:C0ROOM:1.0", "post", None),
    ]
    conn.executemany(
        "INSERT INTO outbox (instance, dedupe_key, kind, channel, text, metadata_json, status, attempts,"
        " created_at) VALUES ('dana', ?, ?, 'C0ROOM', 'x', ?, 'queued', 0, 0)",
        rows,
    )
    conn.commit()
    conn.close()


def test_a_version_3_outbox_keeps_what_each_queued_row_is(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _v3_database(path)
    with Store.open(sqlite_url(str(path))) as store:
        rows = {r.dedupe_key: r for r in store.outbox.queued("dana")}
        assert (rows["turn:dana:7:0"].purpose, rows["turn:dana:7:0"].turn_id) == ("reply", 7)
        assert rows["approval:3:approved:1"].update_of == "approval:3"
        assert {rows[k].purpose for k in ("approval:3", "pause:C0ROOM:1.0")} == {"post"}
        # The next turn still sees the reply it has not sent yet.
        assert store.outbox.unsent_replies("dana", "C0ROOM", "") == ["x"]
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT value FROM schema_meta WHERE key='version'").fetchone() == (
            str(SCHEMA_VERSION),
        )
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert "owner_asks" in tables and "room_notices" not in tables
    finally:
        conn.close()


# The two tables as versions 9 and 11 first made them, by plain SQL.
PLAIN_SQL_TABLES = {
    "assistant_threads": "CREATE TABLE assistant_threads ("
    " instance VARCHAR NOT NULL, channel VARCHAR NOT NULL, thread_ts VARCHAR NOT NULL,"
    " user_id VARCHAR, context_channel VARCHAR, context_name VARCHAR, updated_at FLOAT NOT NULL,"
    " PRIMARY KEY (instance, channel, thread_ts))",
    "reply_drafts": "CREATE TABLE reply_drafts ("
    " instance VARCHAR NOT NULL, turn_id INTEGER NOT NULL, channel VARCHAR NOT NULL,"
    " thread_ts VARCHAR NOT NULL, ts VARCHAR NOT NULL, started_at FLOAT NOT NULL,"
    " PRIMARY KEY (instance, turn_id))",
}


def _columns(path: Path, table: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        return [tuple(r) for r in conn.execute(f"PRAGMA table_info({table})")]
    finally:
        conn.close()


def test_a_version_10_database_gets_reply_drafts_as_a_fresh_one_has_them(tmp_path: Path) -> None:
    """``assistant_threads`` and ``reply_drafts`` are declared with the tables now: a fresh
    database has them with the columns the plain SQL of versions 9 and 11 made, and a
    version 10 database (its ``assistant_threads`` from that SQL) is upgraded to the same."""
    fresh, old = tmp_path / "fresh.db", tmp_path / "old.db"
    with Store.open(sqlite_url(str(fresh))):
        pass
    plain = tmp_path / "plain.db"
    conn = sqlite3.connect(plain)
    conn.executescript(";".join(PLAIN_SQL_TABLES.values()))
    conn.close()
    with Store.open(sqlite_url(str(old))):
        pass
    conn = sqlite3.connect(old)
    conn.executescript(
        "DROP TABLE reply_drafts; DROP TABLE assistant_threads;"
        + PLAIN_SQL_TABLES["assistant_threads"]
        + ";UPDATE schema_meta SET value = '10' WHERE key = 'version';"
    )
    conn.close()
    with Store.open(sqlite_url(str(old))) as store:
        store.reply_drafts.open("dana", 7, "C0ROOM", "1.0")
        store.reply_drafts.started("dana", 7, "2.0")
        draft = store.reply_drafts.of_turn("dana", 7)
        assert draft is not None and (draft.channel, draft.thread_ts, draft.ts) == ("C0ROOM", "1.0", "2.0")
    for table in PLAIN_SQL_TABLES:
        assert _columns(fresh, table) == _columns(plain, table) == _columns(old, table), table


def test_a_version_11_database_keeps_its_steps_and_prices_new_ones(tmp_path: Path) -> None:
    """Version 12 adds ``turn_steps.cost_usd``: an older database's steps stay (no price),
    a new step keeps its price, and the table has the columns a fresh one has."""
    fresh, old = tmp_path / "fresh.db", tmp_path / "old.db"
    with Store.open(sqlite_url(str(fresh))):
        pass
    with Store.open(sqlite_url(str(old))) as store:
        store.steps.add(7, 1, kind="model", name="gpt-4o-mini", tokens=30)
    conn = sqlite3.connect(old)
    conn.executescript(
        "ALTER TABLE turn_steps DROP COLUMN cost_usd;"
        "UPDATE schema_meta SET value = '11' WHERE key = 'version';"
    )
    conn.close()
    with Store.open(sqlite_url(str(old))) as store:
        store.steps.add(7, 2, kind="model", name="gpt-4o-mini", tokens=30, cost_usd=0.0002)
        assert [(s.step, s.cost_usd) for s in store.steps.of(7)] == [(1, None), (2, 0.0002)]
    assert _columns(fresh, "turn_steps") == _columns(old, "turn_steps")


def test_a_version_12_database_keeps_its_handoffs_and_new_ones_carry_their_trace(tmp_path: Path) -> None:
    """Version 13 adds ``handoffs.traceparent``: an older handoff stays (no trace), a new one
    keeps the trace its recipient continues, and the table has a fresh one's columns."""
    fresh, old = tmp_path / "fresh.db", tmp_path / "old.db"
    with Store.open(sqlite_url(str(fresh))):
        pass
    hand = {"from_instance": "dana", "to_instance": "eli", "channel": "C0ROOM", "thread_key": "1.0"}
    with Store.open(sqlite_url(str(old))) as store:
        store.handoffs.add(**hand, text="build it", depth=1, turn_id=7, ts="2.0")
    conn = sqlite3.connect(old)
    conn.executescript(
        "DROP INDEX handoffs_waiting; ALTER TABLE handoffs DROP COLUMN waits_on;"  # version 20's
        "ALTER TABLE handoffs DROP COLUMN traceparent;"
        "UPDATE schema_meta SET value = '12' WHERE key = 'version';"
    )
    conn.close()
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with Store.open(sqlite_url(str(old))) as store:
        store.handoffs.add(**hand, text="test it", depth=1, turn_id=8, ts="3.0", traceparent=parent)
        assert store.handoffs.traceparent("eli", "C0ROOM", "2.0") is None
        assert store.handoffs.traceparent("eli", "C0ROOM", "3.0") == parent
    assert _columns(fresh, "handoffs") == _columns(old, "handoffs")


def test_a_version_19_database_keeps_its_handoffs_and_a_routines_handoff_waits_for_its_post(
    tmp_path: Path,
) -> None:
    """Version 20 adds ``handoffs.waits_on``: an older handoff stays (delivered, waiting on
    nothing), a routine's new one waits for the run's post and is delivered into its thread
    when the post is sent, and the table has a fresh one's columns."""
    fresh, old = tmp_path / "fresh.db", tmp_path / "old.db"
    with Store.open(sqlite_url(str(fresh))):
        pass
    hand = {"from_instance": "dana", "to_instance": "eli", "channel": "C0ROOM", "depth": 1}
    with Store.open(sqlite_url(str(old))) as store:
        store.handoffs.add(**hand, thread_key="1.0", text="build it", turn_id=7, ts="2.0")
    conn = sqlite3.connect(old)
    conn.executescript(
        "DROP INDEX handoffs_waiting; ALTER TABLE handoffs DROP COLUMN waits_on;"
        "UPDATE schema_meta SET value = '19' WHERE key = 'version';"
    )
    conn.close()
    with Store.open(sqlite_url(str(old))) as store:
        waiting = store.messages.add_internal(
            instance="eli",
            channel="C0ROOM",
            thread_key="",
            sender_id="slack:bot:B1",
            text="cue",
            depth=1,
            waiting=True,
        )
        store.handoffs.add(
            **hand, thread_key="", text="test it", turn_id=8, ts=waiting, waits_on="turn:dana:8:0"
        )
        assert store.messages.pending_threads("eli") == []
        assert store.handoffs.deliver_waiting("turn:dana:8:0", "5.0", store.messages) == ["eli"]
        assert store.handoffs.deliver_waiting("turn:dana:8:0", "5.0", store.messages) == []
        assert store.messages.pending_threads("eli") == [("C0ROOM", "5.0")]
        rows = sorted(store.handoffs.recent(), key=lambda r: r.id)
        assert [(r.thread_key, r.waits_on) for r in rows] == [("1.0", None), ("5.0", None)]
        (pending,) = store.messages.pending_in_thread("eli", "C0ROOM", "5.0")
        assert (pending.ts, pending.text) == (rows[1].ts, "cue") and float(pending.ts) > float(waiting)
    assert _columns(fresh, "handoffs") == _columns(old, "handoffs")


def test_a_version_14_database_keeps_its_routines_and_their_pause_and_takes_an_agents_routine(
    tmp_path: Path,
) -> None:
    """Version 15 keys ``routines`` by (instance, name, source): an older database's rows are
    the file's, with their pause, and an agent's routine of the same name sits beside one."""
    fresh, old = tmp_path / "fresh.db", tmp_path / "old.db"
    with Store.open(sqlite_url(str(fresh))):
        pass
    with Store.open(sqlite_url(str(old))) as store:
        store.routines.define("dana", [("plan", "every 1d", "C0ROOM", 86_400.0)])
        store.routines.set_paused("dana", "plan", True, by="operator")
    conn = sqlite3.connect(old)
    conn.executescript(
        "CREATE TABLE routines_v14 (instance VARCHAR NOT NULL, name VARCHAR NOT NULL,"
        " schedule VARCHAR NOT NULL, channel VARCHAR NOT NULL, next_due FLOAT, active BOOLEAN NOT NULL,"
        " paused BOOLEAN NOT NULL, paused_by VARCHAR, run_requested_at FLOAT, updated_at FLOAT NOT NULL,"
        " PRIMARY KEY (instance, name));"
        "INSERT INTO routines_v14 SELECT instance, name, schedule, channel, next_due, active, paused,"
        " paused_by, run_requested_at, updated_at FROM routines;"
        "DROP TABLE routines; ALTER TABLE routines_v14 RENAME TO routines;"
        "UPDATE schema_meta SET value = '14' WHERE key = 'version';"
    )
    conn.close()
    with Store.open(sqlite_url(str(old))) as store:
        [kept] = store.routines.rows("dana")
        assert (kept.name, kept.source, kept.schedule, kept.paused, kept.paused_by) == (
            "plan",
            "file",
            "every 1d",
            True,
            "operator",
        )
        made = store.routines.schedule(
            "dana", "plan", schedule="every 1h", channel="C0ROOM", prompt="x", next_due=3600.0, limit=10
        )
        assert made == "file"  # the file wins the name
        store.routines.define("dana", [])
        made = store.routines.schedule(
            "dana", "plan", schedule="every 1h", channel="C0ROOM", prompt="x", next_due=3600.0, limit=10
        )
        assert made == "created" and len(store.routines.rows("dana")) == 2
    assert _columns(fresh, "routines") == _columns(old, "routines")
