"""Waiting out a store that cannot take work (docs/operations.md, "Survives its database").

The loops that write (the envelope pump, each instance's worker, the turns, the poster,
the lease keeper) meet the same outage: a PostgreSQL server restarting or down, a
connection cut (``pg_terminate_backend``), a SQLite file that is full or read-only. Each
keeps the work it holds and does it again once the store answers; the connection
itself is reopened by the next transaction (``Database``). ``StoreOutage`` is how one
loop waits: ``store unavailable`` with the reason when an outage begins, a backoff
from 0.1 s to 1 s between tries (so the fleet is back within a second of the store),
``store available again`` with how long it lasted. A deadlock's victim is tried again
at once (``store transaction retried``): the other transaction has gone on.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from nanoslack.logs import get_logger
from nanoslack.store.errors import StoreUnavailable, store_unavailable

log = get_logger(__name__)

T = TypeVar("T")

BACKOFF_FIRST_S = 0.1
BACKOFF_MAX_S = 1.0
# A deadlock's victim waits a moment (0–50 ms) so that two victims do not meet again.
DEADLOCK_JITTER_S = 0.05


class StoreOutage:
    """One loop's view of the store's outages (``where`` and ``context`` go on every line)."""

    def __init__(self, where: str, **context: str) -> None:
        self._where = where
        self._context = context
        self._since: float | None = None
        self._delay = BACKOFF_FIRST_S
        self.outages = 0
        self.retries = 0

    async def wait(self, trouble: StoreUnavailable) -> None:
        """The store could not take the work: log it (once per outage) and wait a while."""
        self.retries += 1
        if trouble.deadlock:
            log.info("store transaction retried", where=self._where, reason=trouble.reason, **self._context)
            await asyncio.sleep(random.uniform(0, DEADLOCK_JITTER_S))
            return
        if self._since is None:
            self._since = time.monotonic()
            self._delay = BACKOFF_FIRST_S
            self.outages += 1
            log.warning("store unavailable", where=self._where, reason=trouble.reason, **self._context)
        else:
            log.debug("store still unavailable", where=self._where, reason=trouble.reason, **self._context)
        await asyncio.sleep(self._delay)
        self._delay = min(self._delay * 2, BACKOFF_MAX_S)

    async def attempt(self, work: Callable[[], Awaitable[object]]) -> bool:
        """``await work()`` once. True: the store took it (an outage under way is over);
        False: it could not (logged, and waited out a while: the caller tries again).
        Any other error is raised as it is. Every loop that writes retries through this."""
        try:
            await work()
        except Exception as error:
            trouble = store_unavailable(error)
            if trouble is None:
                raise
            await self.wait(trouble)
            return False
        self.passed()
        return True

    def passed(self) -> None:
        """The work went through: an outage under way is over."""
        if self._since is None:
            return
        seconds = round(time.monotonic() - self._since, 1)
        self._since = None
        log.info("store available again", where=self._where, seconds=seconds, **self._context)


async def until_stored(work: Callable[[], T], outage: StoreOutage) -> T:
    """``work()`` (a transaction), done again until the store takes it; any other error
    is raised as it is."""
    done: list[T] = []

    async def once() -> None:
        done.append(work())

    while not await outage.attempt(once):
        pass
    return done[0]
