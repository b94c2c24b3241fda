"""Schema versions: ``migrate`` brings a database to ``SCHEMA_VERSION`` (``schema_meta``
holds it) and refuses one from the future; ``read_version`` reads it without writing."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, create_engine, inspect, text

# Every table, declared from its row class.
from nanoslack.store import tables
from nanoslack.store.engine import PG_LOCK_MIGRATE, PG_LOCK_SPACE, parse_url
from nanoslack.store.errors import StoreError

SCHEMA_VERSION = 20

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
    tables.METADATA.create_all(conn)


def _add_column(conn: Connection, table: str, column: str, ddl: str) -> None:
    """``ALTER TABLE table ADD COLUMN column ddl``, unless the column is there (a fresh
    database has it from create_all)."""
    if column not in {c["name"] for c in inspect(conn).get_columns(table)}:
        conn.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN {column} {ddl}")


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
    for column, ddl in (
        ("purpose", "TEXT NOT NULL DEFAULT 'post'"),
        ("ask_id", "INTEGER"),
        ("turn_id", "INTEGER"),
        ("update_of", "TEXT"),
    ):
        _add_column(conn, "outbox", column, ddl)
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
    _add_column(conn, "outbox", "attempted_at", "REAL")


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
    _add_column(conn, "messages", "handoff_depth", "INTEGER NOT NULL DEFAULT 0")
    if conn.dialect.name == "postgresql":
        _cache_trigger(conn, "a2a_rooms")  # the router caches a room's kind


def _v7_team(conn: Connection) -> None:
    """Version 7: team rooms' ``tasks``, ``boards``, ``votes`` and ``ballots``; an outbox row
    of a vote names it (``outbox.vote_id``)."""
    _create_tables(conn)
    _add_column(conn, "outbox", "vote_id", "INTEGER")


def _v8_memory(conn: Connection) -> None:
    """Version 8: an agent's own conversation (``agent_history``) and its notes
    (``memories``); a step says how much of its input came from a prompt cache
    (``turn_steps.cached_tokens``)."""
    _create_tables(conn)
    _add_column(conn, "turn_steps", "cached_tokens", "INTEGER NOT NULL DEFAULT 0")


def _v9_assistant_threads(conn: Connection) -> None:
    """Version 9: ``assistant_threads``, the channel a person views with the assistant pane
    open (``nanoslack.store.assistant``). (Made by plain SQL before it was declared in
    ``tables``, with the same columns and key, so either database reads the same.)"""
    _create_tables(conn)


def _v10_routines(conn: Connection) -> None:
    """Version 10: routines' ``routines`` (what the fleet read, and operators' pause and
    run-now) and ``routine_runs`` (one row per due time)."""
    _create_tables(conn)


def _v11_reply_drafts(conn: Connection) -> None:
    """Version 11: ``reply_drafts``, the stream a turn opened while its model was still
    writing (``nanoslack.store.drafts``). (Made by plain SQL before it was declared in
    ``tables``, with the same columns and key.)"""
    _create_tables(conn)


def _v12_step_cost(conn: Connection) -> None:
    """Version 12: what each model call cost in US dollars (``turn_steps.cost_usd``)."""
    _create_tables(conn)
    _add_column(conn, "turn_steps", "cost_usd", "FLOAT")


def _v13_handoff_trace(conn: Connection) -> None:
    """Version 13: the trace a handoff continues (``handoffs.traceparent``)."""
    _create_tables(conn)
    _add_column(conn, "handoffs", "traceparent", "VARCHAR")


def _v15_routine_source(conn: Connection) -> None:
    """Version 15: routines an agent sets (``routines.source``, ``routines.prompt``); a
    name may have a file's row and an agent's, so the key gains ``source``. The table is
    made again with the new key (both databases) and its rows, all the file's, kept."""
    _create_tables(conn)
    have = {c["name"] for c in inspect(conn).get_columns("routines")}
    if "source" in have:  # a fresh database has it from create_all
        return
    names = [c for c in tables.RoutineStateRow.__dataclass_fields__ if c in have]
    listed = ", ".join(names)
    rows = [dict(r._mapping) for r in conn.execute(text(f"SELECT {listed} FROM routines")).all()]
    conn.exec_driver_sql("DROP TABLE routines")
    _create_tables(conn)
    if rows:
        conn.execute(
            text(f"INSERT INTO routines ({listed}) VALUES ({', '.join(':' + n for n in names)})"), rows
        )


def _v18_message_edits(conn: Connection) -> None:
    """Version 18: an edit made after the answer is a message row of its own (``messages.edit_of``)."""
    _create_tables(conn)
    _add_column(conn, "messages", "edit_of", "VARCHAR")


def _v19_history_shown(conn: Connection) -> None:
    """Version 19: where each message a turn was shown sits in its history row's prompt
    (``agent_history.shown``), so a message deleted after its answer can leave it."""
    _create_tables(conn)
    _add_column(conn, "agent_history", "shown", "VARCHAR")


def _v20_handoff_waits(conn: Connection) -> None:
    """Version 20: a routine's handoff waits for the run's post (``handoffs.waits_on``)."""
    _create_tables(conn)
    _add_column(conn, "handoffs", "waits_on", "VARCHAR")


# Each entry upgrades the schema from version i to i+1. Version 1 is the first
# release: the tables as declared in ``tables``. Version 2 adds tables (``turns``,
# ``agent_usage``, ``cache_version``, ``instance_leases``: ``create_all`` creates the
# missing ones) and, on PostgreSQL, the triggers that keep ``cache_version``. Version 3
# adds tables too (``room_halts``, ``room_notices``, ``budget_grants``). Version 4: ``_v4_asks``.
# Version 5: ``_v5_steps``. Version 6: ``_v6_attempted_at``. Version 7: ``_v7_team``.
# Version 8: ``_v8_memory``. Version 9: ``_v9_assistant_threads``. Version 10: ``_v10_routines``.
# Version 11: ``_v11_reply_drafts``. Version 12: ``_v12_step_cost``.
# Version 13: ``_v13_handoff_trace``. Version 14: ``reactions`` (``_create_tables``).
# Version 15: ``_v15_routine_source``.
# Version 16: ``outbox_files`` (``_create_tables``). Version 17: ``feedback`` (``_create_tables``).
# Version 18: ``_v18_message_edits``. Version 19: ``_v19_history_shown``.
# Version 20: ``_v20_handoff_waits``.
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
    _v12_step_cost,
    _v13_handoff_trace,
    _create_tables,
    _v15_routine_source,
    _create_tables,
    _create_tables,
    _v18_message_edits,
    _v19_history_shown,
    _v20_handoff_waits,
]


def read_version(url: str) -> int:
    """The schema version of the database at ``url``, read without writing to it or
    creating it (``nanoslack doctor``): a SQLite file is opened read-only, a server
    gets five seconds to answer; 0 when it has no schema yet."""
    parsed = parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        path = parsed.database or ""
        engine = create_engine(
            "sqlite://", creator=lambda: sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        )
    else:
        engine = create_engine(parsed, connect_args={"connect_timeout": 5})
    try:
        with engine.connect() as conn:
            return _current_version(conn)
    finally:
        engine.dispose()


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
    # The handoffs waiting for a routine's post, looked up as the poster records it sent.
    "CREATE INDEX IF NOT EXISTS handoffs_waiting ON handoffs (waits_on) WHERE waits_on IS NOT NULL",
)


def _ensure_indexes(conn: Connection) -> None:
    for ddl in _INDEXES:
        conn.exec_driver_sql(ddl)
