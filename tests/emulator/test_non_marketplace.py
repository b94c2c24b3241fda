"""The emulator's switch for Slack's 2025 limits on commercially distributed
non-Marketplace apps: ``conversations.history``/``conversations.replies`` answer at
most 15 messages, one call of each a minute per app (429 with ``Retry-After``)."""

from __future__ import annotations

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from nanoslack.emulator import EmulatorClient, ThreadedEmulator


def _thread(temu: ThreadedEmulator, replies: int) -> tuple[WebClient, WebClient, str, str, list[str]]:
    alice = temu.add_user("alice")
    dana, eli = temu.add_app("dana"), temu.add_app("eli")
    room = temu.create_conversation([alice.id, dana.bot_user_id, eli.bot_user_id]).id
    parent = temu.post_as_user(alice.id, room, "a long discussion")
    tss = [temu.post_as_user(alice.id, room, f"point {i}", thread_ts=parent) for i in range(replies)]
    client = WebClient(token=dana.bot_token, base_url=temu.api_url)
    other = WebClient(token=eli.bot_token, base_url=temu.api_url)
    return client, other, room, parent, tss


def test_without_the_switch_a_thread_of_230_replies_comes_in_one_call(temu: ThreadedEmulator) -> None:
    client, _, room, parent, _ = _thread(temu, 230)
    first = client.conversations_replies(channel=room, ts=parent, limit=1000)
    second = client.conversations_replies(channel=room, ts=parent, limit=1000)
    assert len(first["messages"]) == len(second["messages"]) == 231


@pytest.mark.emulator(non_marketplace=True)
def test_the_switch_caps_a_call_at_15_messages_and_one_call_a_minute_per_app(temu: ThreadedEmulator) -> None:
    client, other, room, parent, _ = _thread(temu, 230)
    page = client.conversations_replies(channel=room, ts=parent, limit=200)
    assert len(page["messages"]) == 15 and page["has_more"]
    with pytest.raises(SlackApiError) as limited:
        client.conversations_replies(channel=room, ts=parent, cursor=page["response_metadata"]["next_cursor"])
    assert limited.value.response.status_code == 429
    assert limited.value.response["error"] == "ratelimited"
    assert 1 <= int(limited.value.response.headers["Retry-After"]) <= 60
    # Per app and per method: another app, and the other method, still get their call.
    assert len(other.conversations_replies(channel=room, ts=parent)["messages"]) == 15
    assert len(client.conversations_history(channel=room, limit=100)["messages"]) == 1
    with pytest.raises(SlackApiError):
        client.conversations_history(channel=room)


def test_the_switch_is_also_an_http_driver_endpoint_and_can_be_lifted(temu: ThreadedEmulator) -> None:
    client, _, room, parent, _ = _thread(temu, 20)
    drv = EmulatorClient(temu.base_url)
    drv.set_non_marketplace(True)
    assert len(client.conversations_replies(channel=room, ts=parent)["messages"]) == 15
    with pytest.raises(SlackApiError):
        client.conversations_replies(channel=room, ts=parent)
    drv.set_non_marketplace(False)
    assert len(client.conversations_replies(channel=room, ts=parent)["messages"]) == 21


def test_replies_newer_than_oldest_come_after_the_threads_first_message(temu: ThreadedEmulator) -> None:
    client, _, room, parent, tss = _thread(temu, 30)
    answer = client.conversations_replies(channel=room, ts=parent, oldest=tss[26])
    assert [m["ts"] for m in answer["messages"]] == [parent, *tss[27:]]
    inclusive = client.conversations_replies(channel=room, ts=parent, oldest=tss[26], inclusive=True)
    assert [m["ts"] for m in inclusive["messages"]] == [parent, *tss[26:]]
    latest = client.conversations_replies(channel=room, ts=parent, latest=tss[1])
    assert [m["ts"] for m in latest["messages"]] == [parent, tss[0]]
