"""Which of a turn's reply rows carry its 👍 / 👎 (docs/agent-surface.md "Feedback"): in a DM,
the last of the turn's posts there (a routine's posts to each owner's DM: the last of each
owner's); a next part that was cancelled leaves this one the last; never in a room."""

from __future__ import annotations

from nanoslack.slack.feedback import carries_feedback
from nanoslack.store import OutboxRow, Store

DM, ROOM = "D0ALICE", "G0ROOM"


def _row(store: Store, key: str, *, channel: str | None = DM, dm_user: str | None = None) -> OutboxRow:
    store.outbox.enqueue(
        instance="dana",
        dedupe_key=key,
        purpose="reply",
        turn_id=7,
        channel=channel,
        dm_user=dm_user,
        text="x",
    )
    row = store.outbox.get_by_key(key)
    assert row is not None
    return row


def test_only_the_last_post_of_a_turn_in_a_dm_carries_its_feedback_buttons(store: Store) -> None:
    first, last = _row(store, "turn:dana:7:0"), _row(store, "turn:dana:7:1")
    assert [carries_feedback(store, r, DM) for r in (first, last)] == [False, True]
    assert not carries_feedback(store, last, ROOM)


def test_a_routines_posts_to_each_owners_dm_carry_the_buttons_on_each_owners_last(store: Store) -> None:
    rows = [
        _row(store, f"turn:dana:7:{i}:{owner}", channel=None, dm_user=owner)
        for i in (0, 1)
        for owner in ("U0A", "U0B")
    ]
    assert [carries_feedback(store, r, DM) for r in rows] == [False, False, True, True]


def test_a_cancelled_next_part_leaves_the_post_before_it_the_last(store: Store) -> None:
    first = _row(store, "turn:dana:7:0")
    _row(store, "turn:dana:7:1")
    assert store.outbox.cancel("turn:dana:7:1")
    assert carries_feedback(store, first, DM)
