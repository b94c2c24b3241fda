"""How long pruning takes and how long it holds the write lock per batch.

Fills a SQLite store with ``--old`` finished inbox rows, room-context messages,
sent outbox rows and finished turns older than the retention, plus ``--recent``
of each that must stay, then runs the fleet's prune (``prune_once``) and prints
one JSON object: rows deleted, batches, total seconds, the longest batch (what
an envelope may wait behind), rows left.

    .venv/bin/python bench/retention.py --old 100000 --recent 10000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

from nanoslack.housekeeping import prune_once
from nanoslack.store import Store
from nanoslack.store.retention import Retention, Round

DAY = 86400.0


def fill(store: Store, n: int, at: float, tag: str) -> None:
    raw = store.db._conn.connection.driver_connection
    assert raw is not None
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
    # Two turns per thread so the older one is prunable (the newest is kept).
    raw.executemany(
        "INSERT INTO turns (instance, channel, thread_key, reply_thread_ts, sender_id, status, through_ts,"
        " messages, posts, tokens, wrapping_up, started_at, finished_at) VALUES (?,?,?,?,?,?,?,1,0,0,0,?,?)",
        turns + turns,
    )
    raw.execute("COMMIT")


class TimedRetention(Retention):
    longest = 0.0
    by_table: dict[str, float] = {}

    def prune_batch(self, table: str, rnd: Round) -> tuple[int, bool]:
        start = time.perf_counter()
        try:
            return super().prune_batch(table, rnd)
        finally:
            took = time.perf_counter() - start
            self.longest = max(self.longest, took)
            self.by_table[table] = max(self.by_table.get(table, 0.0), took)


def count(store: Store) -> dict[str, int]:
    raw = store.db._conn.connection.driver_connection
    assert raw is not None
    return {
        t: raw.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
        for t in ("inbox", "messages", "outbox", "turns")
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", type=int, default=100_000)
    ap.add_argument("--recent", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=500)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(f"sqlite:///{Path(tmp) / 'bench.db'}")
        now = time.time()
        fill(store, args.old, now - 20 * DAY, "1600000000")
        fill(store, args.recent, now, "1800000000")
        before = count(store)
        retention = TimedRetention(store.db, days=14, batch=args.batch)
        report = asyncio.run(prune_once(retention))
        result = {
            "old_per_table": args.old,
            "recent_per_table": args.recent,
            "batch": args.batch,
            "before": before,
            "deleted": report.deleted,
            "batches": report.batches,
            "seconds": round(report.seconds, 3),
            "rows_per_s": round(report.total / report.seconds),
            "longest_batch_ms": round(retention.longest * 1000, 2),
            "longest_batch_ms_by_table": {t: round(v * 1000, 2) for t, v in retention.by_table.items()},
            "left": count(store),
        }
        store.close()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
