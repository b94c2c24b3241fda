"""People's edits and deletes, an app's ``chat.delete``, and ``markdown_text`` posts, as
real slack-sdk clients see them: Slack's ``message_changed``/``message_deleted`` shapes and
``markdown_text_conflict``."""

from __future__ import annotations

from typing import Any

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from nanoslack.emulator import ThreadedEmulator

from .listen import listening


def _of(heard: list[dict[str, Any]], subtype: str) -> list[dict[str, Any]]:
    """The events heard of one subtype (an app also hears what was queued while it was away)."""
    return [e for e in heard if e.get("subtype") == subtype]


def test_a_persons_edit_of_a_reply_reaches_apps_as_message_changed(temu: ThreadedEmulator) -> None:
    ann = temu.add_user("ann")
    dana = temu.add_app("dana")
    im = temu.create_conversation([ann.id, dana.bot_user_id], kind="im")
    root = temu.post_as_user(ann.id, im.id, "question")
    reply = temu.post_as_user(ann.id, im.id, "what is 2+2?", thread_ts=root)
    with listening(temu, dana) as heard:
        temu.edit_as_user(ann.id, im.id, reply, "what is 2+3?")
        temu.wait_for(lambda: _of(heard, "message_changed"), timeout=5)
    ev = _of(heard, "message_changed")[0]
    assert ev["subtype"] == "message_changed" and ev["hidden"] is True and "user" not in ev
    assert ev["message"]["ts"] == reply and ev["message"]["thread_ts"] == root
    assert ev["message"]["text"] == "what is 2+3?" and ev["message"]["edited"]["user"] == ann.id
    assert ev["previous_message"]["text"] == "what is 2+2?"
    assert ev["message"]["blocks"][0]["elements"][0]["elements"][0]["text"] == "what is 2+3?"
    history = WebClient(token=dana.bot_token, base_url=temu.api_url).conversations_replies(
        channel=im.id, ts=root
    )
    assert history["messages"][1]["text"] == "what is 2+3?"
    with pytest.raises(Exception, match="cant_update_message"):
        temu.edit_as_user(ann.id, im.id, temu.post_as_user(dana.bot_user_id, im.id, "bot's"), "mine now")


def test_a_persons_delete_reaches_apps_as_message_deleted_and_leaves_history(temu: ThreadedEmulator) -> None:
    ann = temu.add_user("ann")
    dana = temu.add_app("dana")
    room = temu.create_conversation([ann.id, dana.bot_user_id], kind="group", name="crew")
    ts = temu.post_as_user(ann.id, room.id, "oops, secret")
    with listening(temu, dana) as heard:
        temu.delete_as_user(ann.id, room.id, ts)
        temu.wait_for(lambda: _of(heard, "message_deleted"), timeout=5)
    ev = _of(heard, "message_deleted")[0]
    assert ev["subtype"] == "message_deleted" and ev["hidden"] is True and "user" not in ev
    assert ev["deleted_ts"] == ts and ev["previous_message"]["text"] == "oops, secret"
    assert ev["channel"] == room.id and ev["channel_type"] == "group" and ev["ts"] != ts
    history = WebClient(token=dana.bot_token, base_url=temu.api_url).conversations_history(channel=room.id)
    assert history["messages"] == []


def test_chat_delete_tells_the_other_apps(temu: ThreadedEmulator) -> None:
    ann = temu.add_user("ann")
    dana, eli = temu.add_app("dana"), temu.add_app("eli")
    room = temu.create_conversation([ann.id, dana.bot_user_id, eli.bot_user_id], kind="mpim")
    client = WebClient(token=dana.bot_token, base_url=temu.api_url)
    ts = client.chat_postMessage(channel=room.id, text="draft")["ts"]
    with listening(temu, eli) as heard:
        client.chat_delete(channel=room.id, ts=ts)
        temu.wait_for(lambda: _of(heard, "message_deleted"), timeout=5)
    ev = _of(heard, "message_deleted")[0]
    assert ev["deleted_ts"] == ts and ev["previous_message"]["bot_id"] == dana.bot_id
    with pytest.raises(SlackApiError) as caught:
        WebClient(token=eli.bot_token, base_url=temu.api_url).chat_delete(
            channel=room.id, ts=temu.post_as_user(ann.id, room.id, "mine")
        )
    assert caught.value.response["error"] == "cant_delete_message"


def test_markdown_text_is_kept_as_sent_and_mentions_still_count(temu: ThreadedEmulator) -> None:
    ann = temu.add_user("ann")
    dana, eli = temu.add_app("dana"), temu.add_app("eli")
    room = temu.create_conversation([ann.id, dana.bot_user_id, eli.bot_user_id], kind="mpim")
    client = WebClient(token=dana.bot_token, base_url=temu.api_url)
    md = (
        f"**Done**, <@{eli.bot_user_id}>:\n\n- one\n- two\n\n```\ncode\n```\n\n"
        + "| a | b |\n|---|---|\n| 1 | 2 |"
    )
    with listening(temu, eli) as heard:
        posted = client.chat_postMessage(channel=room.id, markdown_text=md)
        temu.wait_for(lambda: any(e["type"] == "app_mention" for e in heard), timeout=5)
    assert posted["message"]["text"] == md
    assert posted["message"]["blocks"] == [{"type": "markdown", "text": md}]
    [stored] = client.conversations_history(channel=room.id)["messages"]
    assert stored["text"] == md and stored["blocks"][0]["type"] == "markdown"
    client.chat_update(channel=room.id, ts=posted["ts"], markdown_text="**Edited**")
    assert temu.all_messages(room.id)[0]["blocks"] == [{"type": "markdown", "text": "**Edited**"}]


@pytest.mark.parametrize("extra", [{"text": "plain"}, {"blocks": [{"type": "divider"}]}])
def test_markdown_text_with_text_or_blocks_is_a_conflict(
    temu: ThreadedEmulator, extra: dict[str, object]
) -> None:
    ann = temu.add_user("ann")
    dana = temu.add_app("dana")
    im = temu.create_conversation([ann.id, dana.bot_user_id], kind="im")
    client = WebClient(token=dana.bot_token, base_url=temu.api_url)
    with pytest.raises(SlackApiError) as caught:
        client.chat_postMessage(channel=im.id, markdown_text="**x**", **extra)  # type: ignore[arg-type]
    assert caught.value.response["error"] == "markdown_text_conflict"
    ts = client.chat_postMessage(channel=im.id, text="first")["ts"]
    with pytest.raises(SlackApiError) as caught:
        client.chat_update(channel=im.id, ts=ts, markdown_text="**x**", **extra)  # type: ignore[arg-type]
    assert caught.value.response["error"] == "markdown_text_conflict"
    with pytest.raises(SlackApiError) as caught:
        client.chat_postMessage(channel=im.id, markdown_text="x" * 12_001)
    assert caught.value.response["error"] == "msg_too_long"
    assert [m["text"] for m in temu.all_messages(im.id)] == ["first"]
