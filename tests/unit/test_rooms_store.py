"""The room-control store: who wins a halt and a resume; budget grants."""

from __future__ import annotations

from nanoslack.store import Store


def test_only_the_first_halt_and_the_first_resume_win(store: Store) -> None:
    assert store.room_halts.halt("G0ROOM", by="slack:U0OWNER", instance="dana")
    assert not store.room_halts.halt("G0ROOM", by="slack:U0OWNER", instance="eli")
    assert store.room_halts.is_halted("G0ROOM") and store.room_halts.halted_rooms() == {"G0ROOM"}
    (row,) = store.room_halts.halted()
    assert (row.room, row.halted_by, row.instance) == ("G0ROOM", "slack:U0OWNER", "dana")
    assert store.room_halts.resume("G0ROOM")
    assert not store.room_halts.resume("G0ROOM")
    assert not store.room_halts.is_halted("G0ROOM")


def test_allow_only_ever_raises_the_days_cap_and_clears_a_stop(store: Store) -> None:
    day = "2026-11-30"
    assert store.grants.get("room", "G0ROOM", day).allowed == 0
    store.grants.stop("room", "G0ROOM", day, by="slack:U0OWNER")
    assert store.grants.get("room", "G0ROOM", day).stopped_by == "slack:U0OWNER"
    store.grants.allow("room", "G0ROOM", day, up_to=50)
    store.grants.allow("room", "G0ROOM", day, up_to=30)
    grant = store.grants.get("room", "G0ROOM", day)
    assert (grant.allowed, grant.stopped_by) == (50, None)
    assert store.grants.get("room", "G0ROOM", "2026-12-01").allowed == 0
