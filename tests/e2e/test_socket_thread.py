"""The sockets on a loop of their own (``SocketOptions(own_thread=True)``, off by default):
the same guarantees as on the fleet's loop. The inbox write happens on the socket thread
before the ack, recorded messages reach the core in the order they happened, an owner's
click crosses over to the core's loop, and stopping leaves no thread behind."""

from __future__ import annotations

import dataclasses
import threading

from tests.e2e.conftest import FAST_SOCKET, Room
from tests.e2e.test_gate import ALLOWED, _approval_dms, _status

THREADED = dataclasses.replace(FAST_SOCKET, own_thread=True)


async def test_a_fleet_with_its_sockets_on_their_own_thread_records_in_order_and_answers(
    room: Room, fleet_factory
) -> None:
    fleet, rec = await fleet_factory(["dana", "eli"], socket=THREADED, SLACK_OWNER=room.human.id)
    assert any(t.name == "nanoslack-sockets" for t in threading.enumerate())
    posted = await room.emu.bulk_post(
        room.human.id, room.channel, [f"{room.mention('dana')} hello {i}" for i in range(30)]
    )
    await room.emu.wait_for(lambda: len(rec.delivered("dana")) >= 30, timeout=30)
    assert [m.ts for m in rec.delivered("dana")] == posted  # each once, in order
    dana = room.apps["dana"].app_id
    await room.emu.wait_for(lambda: room.emu.stats(dana).acked == room.emu.stats(dana).delivered)
    assert room.emu.stats(dana).redelivered == 0
    assert room.sql("SELECT count(*) FROM inbox WHERE instance = 'dana' AND status = 'done'") == [(30,)]

    await fleet.stop()
    assert not any(t.name == "nanoslack-sockets" for t in threading.enumerate())


async def test_an_owners_click_on_the_socket_thread_is_decided_on_the_fleets_loop(
    room: Room, fleet_factory
) -> None:
    await fleet_factory(["dana", "eli"], socket=THREADED, SLACK_OWNER=room.human.id)
    alice = room.human.id
    held = await room.bot_post("eli", f"{room.mention('dana')} numbers attached")
    await room.emu.wait_for(lambda: _approval_dms(room, alice))
    [request] = _approval_dms(room, alice)
    assert _status(room, "dana", held) == "held"

    await room.emu.click_button(
        alice, request["channel"], request["ts"], "nanoslack_approve", request["value"]
    )

    await room.emu.wait_for(lambda: _status(room, "dana", held) in ALLOWED)
