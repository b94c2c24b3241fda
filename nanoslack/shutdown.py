"""A clean stop's clock (docs/operations.md).

SIGTERM starts one ``Shutdown``: the turns under way have ``grace`` seconds
(``NANOSLACK_SHUTDOWN_GRACE``) from then to finish and record their posts; a second
SIGTERM sets ``hurry`` and every wait of the stop ends at once. Each stage that
waits (the pipeline's queue, the turns, the poster's last drain) asks this object
how long it may still wait, so the grace is spent once, not once per stage.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar

DEFAULT_GRACE_S = 20.0
T = TypeVar("T")


@dataclass
class Shutdown:
    grace: float = DEFAULT_GRACE_S
    hurry: asyncio.Event = field(default_factory=asyncio.Event)
    started: float = field(default_factory=time.monotonic)

    def remaining(self, at_least: float = 0.0) -> float:
        """Seconds left of the grace (``at_least`` when more; 0 once hurried)."""
        if self.hurry.is_set():
            return 0.0
        return max(at_least, self.grace - (time.monotonic() - self.started))

    async def wait(self, tasks: set[asyncio.Future[T]], seconds: float) -> set[asyncio.Future[T]]:
        """Wait until ``tasks`` are done, ``seconds`` pass or the stop is hurried;
        the tasks still running."""
        pending = {t for t in tasks if not t.done()}
        if not pending or seconds <= 0 or self.hurry.is_set():
            return pending
        hurried: asyncio.Future[Any] = asyncio.ensure_future(self.hurry.wait())
        try:
            deadline = time.monotonic() + seconds
            while pending and not hurried.done():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                watched: set[asyncio.Future[Any]] = {*pending, hurried}
                await asyncio.wait(watched, timeout=left, return_when=asyncio.FIRST_COMPLETED)
                pending = {t for t in pending if not t.done()}
        finally:
            hurried.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await hurried
        return pending

    async def run(self, awaitable: Awaitable[T], seconds: float) -> bool:
        """Run ``awaitable`` for at most ``seconds`` (less when hurried): True when it
        finished, False when it was cancelled."""
        task = asyncio.ensure_future(awaitable)
        if await self.wait({task}, seconds):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            return False
        task.result()  # its exception, if it failed
        return True


async def cancel(task: asyncio.Task[Any]) -> None:
    """Cancel until it is done: Python 3.11's ``wait_for`` swallows a cancel that
    lands as the awaited event fires (gh-86296), and the fleet's loops (workers, the
    poster, an MCP server's supervisor) wait on one; a single cancel could leave a
    stop waiting forever."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.5)
    if not task.cancelled():
        task.exception()  # retrieved, so asyncio does not log it at exit
