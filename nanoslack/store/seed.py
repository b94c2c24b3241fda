"""Rows in bulk for benches: finished work of a given age (``bench/retention.py``). SQLite
only, outside any transaction of the store's."""

from __future__ import annotations

from collections.abc import Sequence

from nanoslack.store.database import Database


def seed_finished_work(db: Database, n: int, at: float, tag: str) -> None:
    """``n`` finished inbox rows, room-context messages, sent posts and two done turns per
    thread (so the older one is prunable), all at ``at``, in one transaction straight
    through the driver: a retention bench needs 100,000s of them in seconds."""
    raw = db.driver()
    inbox = [("dana", "C1", f"{tag}.{i:07d}", "message", None, "[]", "done", 0, at, at) for i in range(n)]
    msgs = [
        ("dana", "C1", f"{tag}.{i:07d}", "", None, "slack:U1", "hi", "context", 0, 0, at) for i in range(n)
    ]
    outbox = [("dana", f"{tag}:{i}", "post", "C1", "hi", "sent", 0, at, at) for i in range(n)]
    turns = [
        ("dana", "C1", f"{tag}.{i:07d}", "", "slack:U1", "done", f"{tag}.{i:07d}", at, at) for i in range(n)
    ]
    raw.execute("BEGIN")
    raw.executemany(
        "INSERT INTO inbox (instance, channel, ts, event_type, event_id, payload, status, attempts,"
        " received_at, finished_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
        inbox,
    )
    raw.executemany(
        "INSERT INTO messages (instance, channel, ts, thread_key, messaging_group_id, sender_id, text,"
        " status, hop, hop_limit, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        msgs,
    )
    raw.executemany(
        "INSERT INTO outbox (instance, dedupe_key, kind, channel, text, status, attempts, created_at,"
        " sent_at) VALUES (?,?,?,?,?,?,?,?,?)",
        outbox,
    )
    raw.executemany(
        "INSERT INTO turns (instance, channel, thread_key, reply_thread_ts, sender_id, status, through_ts,"
        " messages, posts, tokens, wrapping_up, started_at, finished_at) VALUES (?,?,?,?,?,?,?,1,0,0,0,?,?)",
        turns + turns,
    )
    raw.execute("COMMIT")


def row_counts(db: Database, tables: Sequence[str]) -> dict[str, int]:
    """Rows in each of ``tables`` (names the caller knows: they go into the SQL)."""
    with db.transaction() as conn:
        return {t: int(conn.exec_driver_sql(f"SELECT count(*) FROM {t}").scalar() or 0) for t in tables}
