"""One turn at a time per teammate, when it says so (docs/agents.md, "Turns").

A teammate whose ``SOUL.md`` front matter says ``serial: true`` drives something only one
turn can use at once (a browser, a stateful MCP server): at most one of its turns runs at a
time, across all its threads, the one that has waited longest first. ``TurnSlot`` is that
rule as one small piece: every kind of turn of the instance (a thread's, a feature's own, an
asked one) holds the instance's slot while it runs. Without ``serial`` the slot holds
nobody back; the scheduler's own rule (one turn per thread) is all there is.

Only turns take it: the socket, the pipeline and the acks never wait for a slot.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable


class TurnSlot:
    """An instance's turn slot. ``serial`` is asked as each turn comes for the slot (the
    teammate's files are read again when they change, so an edit applies from the next turn)."""

    def __init__(self, serial: Callable[[], bool] = lambda: False) -> None:
        self._serial = serial
        self._held = False
        # The turns waiting, oldest first: the slot is handed to the head as it is let go.
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        """Turns waiting for the slot now (0 for an instance that is not serial)."""
        return sum(1 for w in self._waiters if not w.done())

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Held for the whole turn: ``async with slot.turn(): ...``. Waits, in the order the
        turns came, while another turn of a serial instance holds it."""
        if not self._serial():
            yield
            return
        await self._take()
        try:
            yield
        finally:
            self._let_go()

    async def _take(self) -> None:
        if not self._held and not self._waiters:
            self._held = True
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._let_go()  # handed the slot as it was cancelled: pass it on
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise

    def _let_go(self) -> None:
        """Hand the slot to the oldest turn still waiting (it stays held), else free it."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._held = False
