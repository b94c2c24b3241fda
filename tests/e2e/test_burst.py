"""A burst bigger than what an instance reads at once waits in the socket, not in
memory, and still arrives whole and in order (docs/architecture.md)."""

from __future__ import annotations

import asyncio
import io
import sqlite3

import pytest

from nanoslack.logs import configure_logging
from nanoslack.slack import pump
from tests.e2e.conftest import Room

BURST = 3 * pump.MAX_QUEUED


async def test_a_restart_with_a_queued_burst_records_everything_once_in_order_with_bounded_backlog(
    room: Room, fleet_factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pump, "MAX_BACKLOG", 32)
    fleet, _ = await fleet_factory(["dana", "eli"])
    await fleet.stop()
    posted = await room.emu.bulk_post(room.human.id, room.channel, [f"burst {i}" for i in range(BURST)])

    fleet, rec = await fleet_factory(["dana", "eli"])
    dana = fleet.instances["dana"]
    widest = 0

    async def sample() -> None:
        nonlocal widest
        while True:
            widest = max(widest, dana.core.inbox.backlog())
            await asyncio.sleep(0)

    sampler = asyncio.create_task(sample())
    try:
        await room.emu.wait_for(lambda: len(rec.delivered("dana")) >= BURST, timeout=60)
    finally:
        sampler.cancel()

    seen = [m.ts for m in rec.delivered("dana")]
    assert seen == posted  # each once, in the order they happened
    # The pump stops reading once the worker is this far behind: at most one
    # socket batch on top of the backlog bound.
    assert 0 < widest <= 32 + pump.MAX_QUEUED  # the sampler saw the backlog build up


async def test_an_event_the_inbox_cannot_take_is_not_acked_and_is_recorded_once_the_store_answers(
    room: Room, fleet_factory
) -> None:
    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    _, rec = await fleet_factory(["dana", "eli"])
    dana = room.apps["dana"].app_id
    # An operator's long write transaction holds SQLite's lock past the busy timeout.
    blocker = sqlite3.connect(room.db, timeout=5, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        acked_before = room.emu.stats(dana).acked
        ts = await room.emu.post_as_user(
            room.human.id, room.channel, f"{room.mention('dana')} are you there?"
        )
        # The pump holds the event, unacked, until the store takes it (Slack's retries
        # meanwhile are the same event).
        await room.emu.wait_for(lambda: '"store unavailable"' in out.getvalue(), timeout=20)
        assert room.emu.stats(dana).acked == acked_before  # no ack: the event is not durable
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    await room.emu.wait_for(lambda: any(m.ts == ts for m in rec.delivered("dana")), timeout=20)
    assert room.emu.stats(dana).redelivered >= 1
    assert [m.ts for m in rec.delivered("dana")].count(ts) == 1
