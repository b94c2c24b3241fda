"""The fleet's background pruning (``NANOSLACK_RETENTION_DAYS``).

Runs on the fleet's loop, one batch per transaction, yielding to the loop between
batches: envelopes that arrive meanwhile wait for one batch at most, never for
the whole prune.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from nanoslack.logs import get_logger
from nanoslack.store.retention import PruneReport, Retention

log = get_logger(__name__)


@dataclass(frozen=True)
class PruneSchedule:
    # Soon after start (the fleet is connected and has caught up), then hourly.
    first_delay: float = 60.0
    interval: float = 3600.0


async def prune_once(retention: Retention) -> PruneReport:
    report = PruneReport()
    for table, n in retention.batches():
        report.add(table, n)
        await asyncio.sleep(0)
    return report


async def prune_forever(
    retention: Retention,
    schedule: PruneSchedule,
    *,
    after: Callable[[], Awaitable[int]] | None = None,
) -> None:
    """Prune every ``schedule.interval``; ``after`` each round: what lives outside the store
    and goes with its rows (the downloaded files of messages pruned, docs/agents.md "Files")."""
    await asyncio.sleep(schedule.first_delay)
    while True:
        try:
            report = await prune_once(retention)
            files = await after() if after is not None else 0
        except Exception as exc:  # a failed round is retried at the next one
            log.warning("store prune failed", error=f"{type(exc).__name__}: {exc}")
        else:
            if files:
                log.info("files pruned", files=files)
            if report.total:
                log.info(
                    "store pruned",
                    retention_days=retention.days,
                    batches=report.batches,
                    seconds=round(report.seconds, 3),
                    **report.deleted,
                )
        await asyncio.sleep(schedule.interval)
