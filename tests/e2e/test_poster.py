"""The poster alone, with a real Web API client against the emulator: what Slack sees of a row."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nanoslack.asks import APPROVAL, OwnerAsks
from nanoslack.emulator import App, Emulator
from nanoslack.slack.client import make_post_client
from nanoslack.slack.poster import MAX_ATTEMPTS, Poster
from nanoslack.slack.retry import Backoff
from nanoslack.store import Store, sqlite_url


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(sqlite_url(str(tmp_path / "nanoslack.db"))) as s:
        yield s


def _dms(emu: Emulator, user: str, app: App) -> list[dict[str, Any]]:
    return [
        m
        for conv in emu.conversations()
        if conv.kind == "im" and user in conv.members
        for m in emu.conversation_messages(conv.id)
        if m.get("bot_id") == app.bot_id
    ]


def _buttons(msg: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (el["action_id"], el["value"])
        for block in msg.get("blocks") or []
        for el in block.get("elements") or []
        if el.get("type") == "button"
    ]


async def test_an_owner_ask_goes_out_as_buttons_and_its_answer_replaces_them(
    emu: Emulator, store: Store
) -> None:
    alice, dana = emu.add_user("alice"), emu.add_app("dana")
    poster = Poster("dana", make_post_client(dana.bot_token, emu.api_url), store)
    asks = OwnerAsks(store, instance="dana", owners=[alice.id])
    assert asks.open(APPROVAL, "7", "*eli* wants to talk to *dana*.", detail="> may I join?")

    assert await poster.drain() == 1
    (dm,) = _dms(emu, alice.id, dana)
    assert _buttons(dm) == [("nanoslack_approve", "7"), ("nanoslack_deny", "7")]
    assert "may I join?" in str(dm["blocks"])
    assert dm["metadata"]["event_type"] == "nanoslack_ask"

    assert asks.close(APPROVAL, "7", choice="approve", by_user=alice.id, verdict=f"Allowed by <@{alice.id}>.")
    assert await poster.drain() == 1
    (dm,) = _dms(emu, alice.id, dana)  # edited in place, not posted again
    assert _buttons(dm) == []
    assert f"Allowed by <@{alice.id}>." in dm["text"] and f"Allowed by <@{alice.id}>." in str(dm["blocks"])


async def test_a_notice_is_marked_as_the_fleets_own_and_a_reply_names_its_turn(
    emu: Emulator, store: Store
) -> None:
    alice, dana, eli = emu.add_user("alice"), emu.add_app("dana"), emu.add_app("eli")
    room = emu.create_conversation([alice.id, dana.bot_user_id, eli.bot_user_id], kind="mpim").id
    poster = Poster("dana", make_post_client(dana.bot_token, emu.api_url), store)
    store.outbox.enqueue(instance="dana", dedupe_key="n1", purpose="notice", channel=room, text="⏸️ Paused")
    store.outbox.enqueue(
        instance="dana", dedupe_key="r1", purpose="reply", turn_id=42, channel=room, text="hi"
    )

    assert await poster.drain() == 2
    by_text = {m["text"]: m["metadata"] for m in emu.conversation_messages(room)}
    assert by_text["⏸️ Paused"]["event_type"] == "nanoslack_notice"
    assert by_text["hi"]["event_type"] == "nanoslack_turn"
    assert by_text["hi"]["event_payload"]["turn"] == 42


async def test_a_reaction_slack_already_has_is_sent_not_failed_so_a_redo_after_a_crash_is_harmless(
    emu: Emulator, store: Store
) -> None:
    alice, dana = emu.add_user("alice"), emu.add_app("dana")
    room = emu.create_conversation([alice.id, dana.bot_user_id], kind="im")
    ts = await emu.post_as_user(alice.id, room.id, "shipped")
    # The first attempt reached Slack; the process died before recording it.
    await make_post_client(dana.bot_token, emu.api_url).reactions_add(
        channel=room.id, timestamp=ts, name="tada"
    )
    store.outbox.enqueue(
        instance="dana",
        dedupe_key="react:dana:1:tada",
        kind="reaction",
        channel=room.id,
        update_ts=ts,
        text="tada",
    )
    poster = Poster("dana", make_post_client(dana.bot_token, emu.api_url), store)
    assert await poster.drain() == 1
    assert store.outbox.get_by_key("react:dana:1:tada").status == "sent"  # type: ignore[union-attr]
    [message] = [m for m in emu.all_messages(room.id) if m["ts"] == ts]
    assert message["reactions"] == [{"name": "tada", "users": [dana.bot_user_id], "count": 1}]


async def test_a_reply_slack_refuses_with_its_own_failures_many_times_over_goes_out_once_when_slack_recovers(
    emu: Emulator, store: Store
) -> None:
    alice, dana = emu.add_user("alice"), emu.add_app("dana")
    room = emu.create_conversation([alice.id, dana.bot_user_id], kind="im").id
    # No wait between tries: the test drives the drains itself.
    poster = Poster(
        "dana", make_post_client(dana.bot_token, emu.api_url), store, backoff=lambda: Backoff(0.0, 0.0)
    )
    store.outbox.enqueue(
        instance="dana", dedupe_key="r1", purpose="reply", turn_id=1, channel=room, text="hi"
    )
    # An outage of Slack's own: more refusals in a row than a row's attempts at any other error.
    emu.fail_next("chat.postMessage", MAX_ATTEMPTS + 3, error="internal_error")

    for _ in range(MAX_ATTEMPTS + 3):
        assert await poster.drain() == 0
        assert store.outbox.get_by_key("r1").status == "queued"  # type: ignore[union-attr]
    assert await poster.drain() == 1
    assert [m["text"] for m in emu.conversation_messages(room)] == ["hi"]


async def test_a_reply_slack_refuses_for_good_is_failed_at_once(emu: Emulator, store: Store) -> None:
    dana = emu.add_app("dana")
    poster = Poster("dana", make_post_client(dana.bot_token, emu.api_url), store)
    store.outbox.enqueue(
        instance="dana", dedupe_key="r1", purpose="reply", turn_id=1, channel="C0GONE", text="hi"
    )
    assert await poster.drain() == 0
    row = store.outbox.get_by_key("r1")
    assert row is not None and (row.status, row.error) == ("failed", "channel_not_found")
