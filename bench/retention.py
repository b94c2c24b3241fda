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
from nanoslack.store.seed import row_counts, seed_finished_work

DAY = 86400.0
PRUNED = ("inbox", "messages", "outbox", "turns")


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", type=int, default=100_000)
    ap.add_argument("--recent", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=500)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(f"sqlite:///{Path(tmp) / 'bench.db'}")
        now = time.time()
        seed_finished_work(store.db, args.old, now - 20 * DAY, "1600000000")
        seed_finished_work(store.db, args.recent, now, "1800000000")
        before = row_counts(store.db, PRUNED)
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
            "left": row_counts(store.db, PRUNED),
        }
        store.close()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
