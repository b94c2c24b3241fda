"""Slack's agent surface as the emulator serves it to real slack-sdk clients: the status
line, streamed messages (slack-sdk's own ``chat_stream`` helper too), the assistant pane and
its events, and the refusals an app without ``assistant:write`` gets."""

from __future__ import annotations

from typing import Any

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode import SocketModeClient
from slack_sdk.socket_mode.client import BaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse

from nanoslack.emulator import ThreadedEmulator
from nanoslack.emulator.state import DEFAULT_SCOPES

META = {"event_type": "nanoslack_turn", "event_payload": {"turn": 7}}


def _dm(temu: ThreadedEmulator, scopes: list[str] | None = None) -> tuple[WebClient, str, str, str]:
    """dana's client, the IM with ann, ann's id and the ts of ann's message there."""
    ann = temu.add_user("ann")
    dana = temu.add_app("dana", scopes=scopes)
    im = temu.create_conversation([dana.bot_user_id, ann.id], kind="im")
    ts = temu.post_as_user(ann.id, im.id, "hello")
    return WebClient(token=dana.bot_token, base_url=temu.api_url), im.id, ann.id, ts


def test_a_status_shows_until_the_app_posts_in_its_thread(temu: ThreadedEmulator) -> None:
    client, im, _ann, ts = _dm(temu)
    client.assistant_threads_setStatus(channel_id=im, thread_ts=ts, status="is thinking…")
    assert temu.status_of(im, ts) == "is thinking…"
    client.chat_postMessage(channel=im, thread_ts=ts, text="done")
    assert temu.status_of(im, ts) == ""
    client.assistant_threads_setStatus(channel_id=im, thread_ts=ts, status="is using search…")
    client.assistant_threads_setStatus(channel_id=im, thread_ts=ts, status="")
    assert temu.status_of(im, ts) == ""
    assert [s for _t, s in temu.statuses_sent(im)] == ["is thinking…", "is using search…", ""]


@pytest.mark.emulator(status_timeout=0.3)
def test_a_status_not_sent_again_is_gone_after_the_timeout(temu: ThreadedEmulator) -> None:
    client, im, _ann, ts = _dm(temu)
    client.assistant_threads_setStatus(channel_id=im, thread_ts=ts, status="is thinking…")
    temu.wait_for(lambda: temu.status_of(im, ts) == "", timeout=5, message="status cleared by the timeout")


def test_a_stream_is_one_message_that_grows_until_it_stops(temu: ThreadedEmulator) -> None:
    client, im, ann, ts = _dm(temu)
    started = client.chat_startStream(
        channel=im, thread_ts=ts, markdown_text="Hel", recipient_user_id=ann, recipient_team_id="T0EMULATOR"
    )
    sts = started["ts"]
    assert temu.is_streaming(im, sts)
    client.chat_appendStream(channel=im, ts=sts, markdown_text="lo, ")
    client.chat_appendStream(
        channel=im,
        ts=sts,
        chunks=[
            {"type": "task_update", "id": "t1", "title": "search", "status": "in_progress"},
            {"type": "markdown_text", "text": "world"},
        ],
    )
    client.chat_appendStream(
        channel=im,
        ts=sts,
        chunks=[{"type": "task_update", "id": "t1", "title": "search", "status": "complete"}],
    )
    client.chat_stopStream(channel=im, ts=sts, markdown_text="!", metadata=META)
    assert not temu.is_streaming(im, sts)
    replies = [m for m in temu.all_messages(im) if m.get("thread_ts") == ts and m["ts"] != ts]
    assert [m["text"] for m in replies] == ["Hello, world!"]
    assert replies[0]["metadata"] == META
    assert [t["status"] for t in temu.stream_tasks(im, sts)] == ["complete"]
    assert temu.stream_calls(im) == {"chat.startStream": 1, "chat.appendStream": 3, "chat.stopStream": 1}
    with pytest.raises(SlackApiError) as caught:
        client.chat_appendStream(channel=im, ts=sts, markdown_text="more")
    assert caught.value.response["error"] == "message_not_in_streaming_state"


def test_slack_sdks_chat_stream_helper_works_against_it(temu: ThreadedEmulator) -> None:
    client, im, ann, ts = _dm(temu)
    streamer = client.chat_stream(
        channel=im, thread_ts=ts, recipient_user_id=ann, recipient_team_id="T0EMULATOR", buffer_size=8
    )
    for word in ("one ", "two ", "three ", "four"):
        streamer.append(markdown_text=word)
    streamer.stop(metadata=META)
    reply = [m for m in temu.all_messages(im) if m.get("thread_ts") == ts and m["ts"] != ts][0]
    assert reply["text"] == "one two three four"
    assert reply["metadata"] == META


@pytest.mark.parametrize(
    ("drop", "error"),
    [("recipient_user_id", "missing_recipient_user_id"), ("recipient_team_id", "missing_recipient_team_id")],
)
def test_a_stream_needs_its_recipient_ids(temu: ThreadedEmulator, drop: str, error: str) -> None:
    client, im, ann, ts = _dm(temu)
    args: dict[str, Any] = {"recipient_user_id": ann, "recipient_team_id": "T0EMULATOR"}
    del args[drop]
    with pytest.raises(SlackApiError) as caught:
        client.chat_startStream(channel=im, thread_ts=ts, markdown_text="x", **args)
    assert caught.value.response["error"] == error
    assert not [m for m in temu.all_messages(im) if m["ts"] != ts]


def test_a_streams_text_is_at_most_12000_characters_a_call(temu: ThreadedEmulator) -> None:
    client, im, ann, ts = _dm(temu)
    with pytest.raises(SlackApiError) as caught:
        client.chat_startStream(
            channel=im,
            thread_ts=ts,
            markdown_text="x" * 12_001,
            recipient_user_id=ann,
            recipient_team_id="T0EMULATOR",
        )
    assert caught.value.response["error"] == "msg_too_long"


def test_an_edit_finishes_a_stream(temu: ThreadedEmulator) -> None:
    client, im, ann, ts = _dm(temu)
    sts = client.chat_startStream(
        channel=im, thread_ts=ts, markdown_text="par", recipient_user_id=ann, recipient_team_id="T0EMULATOR"
    )["ts"]
    client.chat_update(channel=im, ts=sts, text="partial, then whole", metadata=META)
    assert not temu.is_streaming(im, sts)
    assert temu.engine.ws.channels[im].by_ts.get(sts) is not None
    assert [m["text"] for m in temu.all_messages(im) if m["ts"] == sts] == ["partial, then whole"]


def test_an_app_without_assistant_write_is_refused_with_missing_scope(temu: ThreadedEmulator) -> None:
    client, im, ann, ts = _dm(temu, scopes=sorted(DEFAULT_SCOPES - {"assistant:write"}))
    for call in (
        lambda: client.chat_startStream(
            channel=im, thread_ts=ts, markdown_text="x", recipient_user_id=ann, recipient_team_id="T0EMULATOR"
        ),
        lambda: client.assistant_threads_setSuggestedPrompts(
            channel_id=im, thread_ts=ts, prompts=[{"title": "a", "message": "b"}]
        ),
        lambda: client.assistant_threads_setTitle(channel_id=im, thread_ts=ts, title="t"),
    ):
        with pytest.raises(SlackApiError) as caught:
            call()
        assert caught.value.response["error"] == "missing_scope"
        assert caught.value.response["needed"] == "assistant:write"
    # The status line takes chat:write too (Slack, 2026-03).
    client.assistant_threads_setStatus(channel_id=im, thread_ts=ts, status="is thinking…")
    assert temu.status_of(im, ts) == "is thinking…"


def test_the_pane_sends_its_events_and_keeps_prompts_and_title(temu: ThreadedEmulator) -> None:
    ann = temu.add_user("ann")
    dana = temu.add_app("dana")
    general = temu.create_conversation([ann.id], kind="channel", name="general")
    events: list[dict[str, Any]] = []
    sm = SocketModeClient(app_token=dana.app_token, web_client=WebClient(token="x", base_url=temu.api_url))

    def on_request(client: BaseSocketModeClient, req: SocketModeRequest) -> None:
        client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))
        events.append(req.payload["event"])

    sm.socket_mode_request_listeners.append(on_request)
    sm.connect()
    try:
        temu.wait_for(lambda: temu.connections(dana.app_id) == 1, timeout=5)
        thread_ts = temu.open_assistant_thread(ann.id, "dana", context_channel=general.id)
        temu.wait_for(lambda: len(events) >= 1, timeout=5)
        started = events[0]
        assert started["type"] == "assistant_thread_started"
        im = started["assistant_thread"]["channel_id"]
        assert started["assistant_thread"]["thread_ts"] == thread_ts
        assert started["assistant_thread"]["user_id"] == ann.id
        assert started["assistant_thread"]["context"]["channel_id"] == general.id
        temu.change_assistant_context(ann.id, "dana", im, thread_ts, general.id)
        temu.wait_for(lambda: len(events) >= 2, timeout=5)
        assert events[1]["type"] == "assistant_thread_context_changed"
    finally:
        sm.close()
    web = WebClient(token=dana.bot_token, base_url=temu.api_url)
    prompts = [{"title": "Plan my day", "message": "What should I do today?"}]
    web.assistant_threads_setSuggestedPrompts(
        channel_id=im, thread_ts=thread_ts, prompts=prompts, title="Try"
    )
    web.assistant_threads_setTitle(channel_id=im, thread_ts=thread_ts, title="dana")
    assert temu.suggested_prompts(im, thread_ts) == {"prompts": prompts, "title": "Try"}
    assert temu.thread_title(im, thread_ts) == "dana"
    with pytest.raises(SlackApiError) as caught:
        web.assistant_threads_setSuggestedPrompts(
            channel_id=im, thread_ts=thread_ts, prompts=[{"title": str(i), "message": "m"} for i in range(5)]
        )
    assert caught.value.response["error"] == "invalid_arguments"
