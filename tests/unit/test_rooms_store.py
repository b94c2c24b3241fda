"""The room-control store: who wins a halt, a resume, a notice; budget grants."""

from __future__ import annotations

from nanoslack.store import Store


def test_only_the_first_halt_and_the_first_resume_win(store: Store) -> None:
    assert store.rooms.halt("G0ROOM", by="slack:U0OWNER", instance="dana")
    assert not store.rooms.halt("G0ROOM", by="slack:U0OWNER", instance="eli")
    assert store.rooms.is_halted("G0ROOM") and store.rooms.halted_rooms() == {"G0ROOM"}
    (row,) = store.rooms.halted()
    assert (row.room, row.halted_by, row.instance) == ("G0ROOM", "slack:U0OWNER", "dana")
    assert store.rooms.resume("G0ROOM")
    assert not store.rooms.resume("G0ROOM")
    assert not store.rooms.is_halted("G0ROOM")


def test_a_notice_is_claimed_once_per_room_kind_and_epoch(store: Store) -> None:
    assert store.rooms.claim_notice("G0ROOM", "pause", "1.0", instance="dana")
    assert not store.rooms.claim_notice("G0ROOM", "pause", "1.0", instance="eli")
    assert store.rooms.claim_notice("G0ROOM", "pause", "2.0", instance="eli")
    assert store.rooms.claim_notice("G0OTHER", "pause", "1.0", instance="eli")


def test_allow_only_ever_raises_the_days_cap_and_clears_a_stop(store: Store) -> None:
    day = "2026-11-30"
    assert store.rooms.grant("room", "G0ROOM", day).allowed == 0
    store.rooms.stop("room", "G0ROOM", day, by="slack:U0OWNER")
    assert store.rooms.grant("room", "G0ROOM", day).stopped_by == "slack:U0OWNER"
    store.rooms.allow("room", "G0ROOM", day, up_to=50)
    store.rooms.allow("room", "G0ROOM", day, up_to=30)
    grant = store.rooms.grant("room", "G0ROOM", day)
    assert (grant.allowed, grant.stopped_by) == (50, None)
    assert store.rooms.grant("room", "G0ROOM", "2026-12-01").allowed == 0
