"""Group commit for the intake: inbox records that arrive together share a commit.

Every envelope still waits for its own record to be durable before it is acked;
what changes is that the envelopes bolt is dispatching in the same loop tick are
written by one transaction (SQLite's cost is per commit, not per row).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from nanoslack import failpoints
from nanoslack.inbound import Inbound

AcceptMany = Callable[[Sequence[Inbound]], list[bool]]


class GroupCommit:
    def __init__(self, accept_many: AcceptMany) -> None:
        self._accept_many = accept_many
        self._pending: list[tuple[Inbound, asyncio.Future[bool]]] = []
        self._scheduled = False
        self.batches = 0
        self.records = 0

    async def record(self, msg: Inbound) -> bool:
        """True when ``msg`` is new; raises if the inbox could not take it."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        self._pending.append((msg, future))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        return await future

    def record_now(self, msgs: Sequence[Inbound]) -> list[bool]:
        """A batch the caller already holds (the Socket Mode pump), in one commit;
        raises if the inbox could not take it."""
        results = self._accept_many(msgs)
        self.batches += 1
        self.records += len(msgs)
        failpoints.hit("inbox.recorded", len(msgs))
        return results

    def _flush(self) -> None:
        batch, self._pending, self._scheduled = self._pending, [], False
        try:
            results = self.record_now([msg for msg, _ in batch])
        except Exception as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), fresh in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(fresh)
