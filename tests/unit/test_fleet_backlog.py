"""The fleet's backlog: turns let the sockets' reads go first, and never wait for ever."""

from __future__ import annotations

import asyncio

from nanoslack.worker import TURN_STAGE_SOCKET_MAX_S, FleetBacklog


async def _ticks(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_turn_between_stages_waits_while_a_socket_has_unacked_envelopes() -> None:
    busy = True
    backlog = FleetBacklog(sockets_busy=lambda: busy)
    stage = asyncio.create_task(backlog.between_stages())
    await _ticks(5)
    assert not stage.done()  # the socket's read envelopes go first
    busy = False
    await asyncio.wait_for(stage, timeout=1)


async def test_a_turn_between_stages_goes_on_after_the_bound_when_the_socket_is_never_idle() -> None:
    backlog = FleetBacklog(sockets_busy=lambda: True)  # a steady stream: some envelope is always unacked
    loop = asyncio.get_running_loop()
    start = loop.time()
    await asyncio.wait_for(backlog.between_stages(), timeout=1)
    # The bound is start + 0.02 on the loop's clock; subtracting back may round below 0.02.
    assert loop.time() - start >= TURN_STAGE_SOCKET_MAX_S - 1e-9


async def test_a_turn_between_stages_does_not_wait_for_the_pipelines_backlog() -> None:
    """A turn under way finishes its stages; only the start of a turn waits for the
    pipelines to catch up (``yield_to``)."""
    backlog = FleetBacklog()
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(1000):
        queue.put_nowait(i)
    backlog.add(queue)
    assert backlog.behind()
    stage = asyncio.create_task(backlog.between_stages())
    await _ticks(2)
    assert stage.done()
    start = asyncio.create_task(backlog.yield_to())
    await _ticks(5)
    assert not start.done()
    start.cancel()
