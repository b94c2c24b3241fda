"""Slack's agent platform (docs/emulator.md) as the emulator serves it to real slack-sdk and bolt
clients: agent sessions and their Stop button, the Home tab (``views.publish``,
``app_home_opened``, clicks in it), ``app_context_changed`` and the feedback buttons."""

from __future__ import annotations

from typing import Any

import pytest
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from nanoslack.emulator import Emulator, EmulatorError, ThreadedEmulator
from nanoslack.emulator.state import DEFAULT_EVENTS, DEFAULT_SCOPES

from .listen import listening

FEEDBACK = [
    {"type": "markdown", "text": "**Answer**"},
    {
        "type": "context_actions",
        "block_id": "fb",
        "elements": [
            {
                "type": "feedback_buttons",
                "action_id": "feedback",
                "positive_button": {"text": {"type": "plain_text", "text": "👍"}, "value": "good"},
                "negative_button": {"text": {"type": "plain_text", "text": "👎"}, "value": "bad"},
            }
        ],
    },
]


def _dm(temu: ThreadedEmulator, **app: Any) -> tuple[WebClient, Any, str, str]:
    """dana's client, ann, their DM and the ts of ann's question there."""
    ann = temu.add_user("ann")
    dana = temu.add_app("dana", **app)
    im = temu.create_conversation([dana.bot_user_id, ann.id], kind="im")
    ts = temu.post_as_user(ann.id, im.id, "summarise the week")
    return WebClient(token=dana.bot_token, base_url=temu.api_url), ann, im.id, ts


def test_a_stop_click_stops_the_threads_streams_and_leaves_the_status_to_the_app(
    temu: ThreadedEmulator,
) -> None:
    client, ann, im, ts = _dm(temu)
    dana = temu.app("dana")
    r = client.agents_sessions_setStatus(
        channel_id=im, thread_ts=ts, status="processing", title="Week summary"
    )
    assert (r["status"], r["title"]) == ("processing", "Week summary") and "warning" not in r
    stream = client.chat_startStream(
        channel=im,
        thread_ts=ts,
        markdown_text="So far",
        recipient_user_id=ann.id,
        recipient_team_id="T0EMULATOR",
    )["ts"]
    with listening(temu, dana) as heard:
        event = temu.click_stop(ann.id, im, ts)
        temu.wait_for(lambda: any(e["type"] == "agent_session_stopped" for e in heard), timeout=5)
    got = next(e for e in heard if e["type"] == "agent_session_stopped")
    assert got == event
    assert (got["channel"], got["thread_ts"], got["user"], got["streaming_message_ts"]) == (
        im,
        ts,
        ann.id,
        [stream],
    )
    with pytest.raises(SlackApiError) as caught:  # Slack stopped the stream
        client.chat_appendStream(channel=im, ts=stream, markdown_text=" more")
    assert caught.value.response["error"] == "message_not_in_streaming_state"
    session = temu.session(im, ts)
    assert session is not None and session["status"] == "processing"  # the app moves it
    client.agents_sessions_setStatus(channel_id=im, thread_ts=ts, status="active", title="ignored now")
    session = temu.session(im, ts)
    assert session is not None and session["statuses"] == ["processing", "active"]
    assert session["title"] == "Week summary"
    with pytest.raises(EmulatorError, match="session_not_processing"):  # no Stop button now
        temu.click_stop(ann.id, im, ts)
    client.agents_sessions_rename(channel_id=im, thread_ts=ts, title="Friday summary")
    assert temu.session(im, ts)["title"] == "Friday summary"  # type: ignore[index]


def test_stop_stream_moves_a_processing_session_to_active(temu: ThreadedEmulator) -> None:
    client, ann, im, ts = _dm(temu)
    client.agents_sessions_setStatus(channel_id=im, thread_ts=ts, status="processing")
    s = client.chat_startStream(
        channel=im,
        thread_ts=ts,
        markdown_text="Done.",
        recipient_user_id=ann.id,
        recipient_team_id="T0EMULATOR",
    )["ts"]
    client.chat_stopStream(channel=im, ts=s)
    assert temu.session(im, ts)["status"] == "active"  # type: ignore[index]


def test_sessions_refuse_what_slack_refuses(temu: ThreadedEmulator) -> None:
    client, _ann, im, ts = _dm(temu, events=sorted(DEFAULT_EVENTS - {"agent_session_stopped"}))
    r = client.agents_sessions_setStatus(channel_id=im, thread_ts=ts, status="processing")
    assert r["warning"] == "missing_agent_session_stopped_event_subscription"
    for call, error in (
        (
            lambda: client.agents_sessions_setStatus(channel_id=im, thread_ts=ts, status="thinking"),
            "invalid_arguments",
        ),
        (lambda: client.agents_sessions_setStatus(channel_id=im, status="active"), "invalid_arguments"),
        (
            lambda: client.agents_sessions_setStatus(
                channel_id=im, thread_ts=ts, status="active", title="t" * 201
            ),
            "invalid_arguments",
        ),
        (
            lambda: client.agents_sessions_setStatus(channel_id=im, thread_ts="1.000001", status="active"),
            "thread_not_found",
        ),
        (
            lambda: client.agents_sessions_rename(channel_id=im, thread_ts="1.000001", title="x"),
            "session_not_found",
        ),
    ):
        with pytest.raises(SlackApiError) as caught:
            call()
        assert caught.value.response["error"] == error
    old = temu.add_app("eli", scopes=sorted(DEFAULT_SCOPES - {"assistant:write"}))
    eli_im = temu.create_conversation([old.bot_user_id, "ann"], kind="im")
    with pytest.raises(SlackApiError) as caught:  # not declared as an agent
        WebClient(token=old.bot_token, base_url=temu.api_url).agents_sessions_setStatus(
            channel_id=eli_im.id, thread_ts=temu.post_as_user("ann", eli_im.id, "hi"), status="processing"
        )
    assert caught.value.response["error"] == "missing_scope"


def test_the_home_tab_is_published_per_user_and_opened_with_its_view(temu: ThreadedEmulator) -> None:
    client, ann, im, _ts = _dm(temu)
    bob = temu.add_user("bob")
    dana = temu.app("dana")
    with listening(temu, dana) as heard:
        first = temu.open_app_home(ann.id, "dana")
        assert first["tab"] == "home" and first["channel"] == im and "view" not in first
        home = {
            "type": "home",
            "blocks": [
                {
                    "type": "actions",
                    "block_id": "rooms",
                    "elements": [
                        {
                            "type": "button",
                            "action_id": "resume",
                            "text": {"type": "plain_text", "text": "Resume"},
                            "value": "C1",
                        }
                    ],
                }
            ],
        }
        view = client.views_publish(user_id=ann.id, view=home)["view"]
        assert view["type"] == "home" and view["app_id"] == dana.app_id and view["blocks"] == home["blocks"]
        assert temu.home_view("dana", ann.id)["id"] == view["id"]  # type: ignore[index]
        assert temu.home_view("dana", bob.id) is None
        again = temu.open_app_home(ann.id, "dana")
        messages = temu.open_app_home(ann.id, "dana", tab="messages")
        click = temu.click_home_button(ann.id, "dana", "resume")
        temu.wait_for(
            lambda: len([e for e in heard if e.get("type") in ("app_home_opened", "block_actions")]) >= 4
        )
    assert again["view"]["id"] == view["id"] and "view" not in messages and messages["tab"] == "messages"
    assert click["container"] == {"type": "view", "view_id": view["id"]} and click["user"]["id"] == ann.id
    assert click["actions"][0]["value"] == "C1" and click["view"]["id"] == view["id"]
    with pytest.raises(SlackApiError) as caught:
        client.views_publish(user_id=ann.id, view=home, hash="stale.hash")
    assert caught.value.response["error"] == "hash_conflict"
    client.views_publish(user_id=ann.id, view=home, hash=view["hash"])
    for bad_user, bad_view in ((ann.id, {"type": "modal", "blocks": []}), ("U0NOBODY", home)):
        with pytest.raises(SlackApiError) as caught:
            client.views_publish(user_id=bad_user, view=bad_view)
        assert caught.value.response["error"] == "invalid_arguments"


def test_app_context_changed_names_the_channel_viewed_or_nothing(temu: ThreadedEmulator) -> None:
    _client, ann, _im, _ts = _dm(temu)
    general = temu.create_conversation([ann.id], kind="channel", name="general")
    with listening(temu, temu.app("dana")) as heard:
        temu.change_app_context("dana", general.id)
        temu.change_app_context("dana")
        temu.wait_for(lambda: len([e for e in heard if e["type"] == "app_context_changed"]) >= 2)
    # Delivery order is not promised (a slow ack brings an event again, later), as in Slack.
    contexts = [e["context"] for e in heard if e["type"] == "app_context_changed"]
    assert {} in contexts
    assert {
        "entities": [{"type": "slack#/types/channel_id", "value": general.id, "team_id": "T0EMULATOR"}]
    } in contexts


async def test_bolt_hears_a_feedback_click_a_stop_and_a_context_change(emu: Emulator) -> None:
    ann = emu.add_user("ann")
    dana = emu.add_app("dana")
    im = emu.create_conversation([dana.bot_user_id, ann.id], kind="im")
    ts = await emu.post_as_user(ann.id, im.id, "hi")
    web = AsyncWebClient(token=dana.bot_token, base_url=emu.api_url)
    bolt = AsyncApp(token=dana.bot_token, client=web)
    got: list[dict[str, Any]] = []

    @bolt.action("feedback")
    async def on_feedback(ack: Any, body: dict[str, Any]) -> None:
        await ack()
        got.append(body["actions"][0])

    @bolt.event("agent_session_stopped")
    async def on_stop(event: dict[str, Any]) -> None:
        got.append(event)

    @bolt.event("app_context_changed")
    async def on_context(event: dict[str, Any]) -> None:
        got.append(event)

    handler = AsyncSocketModeHandler(bolt, app_token=dana.app_token, ping_interval=0.5)
    await handler.connect_async()  # type: ignore[no-untyped-call]
    try:
        await emu.wait_for(lambda: emu.connections(dana.app_id) >= 1)
        reply = await web.chat_postMessage(channel=im.id, thread_ts=ts, blocks=FEEDBACK, text="Answer")
        await emu.click_feedback(ann.id, im.id, reply["ts"], positive=False)
        await web.agents_sessions_setStatus(channel_id=im.id, thread_ts=ts, status="processing")
        await emu.click_stop(ann.id, im.id, ts)
        await emu.change_app_context("dana", im.id)
        kinds = {"feedback_buttons", "agent_session_stopped", "app_context_changed"}
        await emu.wait_for(lambda: {e["type"] for e in got} == kinds, timeout=8)
    finally:
        await handler.close_async()  # type: ignore[no-untyped-call]
    feedback = next(e for e in got if e["type"] == "feedback_buttons")
    stop = next(e for e in got if e["type"] == "agent_session_stopped")
    assert (feedback["type"], feedback["action_id"], feedback["value"]) == (
        "feedback_buttons",
        "feedback",
        "bad",
    )
    assert feedback["block_id"] == "fb" and feedback["text"]["text"] == "👎"
    assert stop["type"] == "agent_session_stopped" and stop["thread_ts"] == ts
    plain = await web.chat_postMessage(channel=im.id, text="no buttons")
    with pytest.raises(EmulatorError, match="no_feedback_buttons"):
        await emu.click_feedback(ann.id, im.id, plain["ts"])


def _refusal(call: Any) -> str:
    with pytest.raises(SlackApiError) as err:
        call()
    return str(err.value.response["error"])


def test_a_markdown_block_with_feedback_buttons_is_kept_as_sent_and_bad_ones_are_invalid_blocks(
    temu: ThreadedEmulator,
) -> None:
    client, ann, im, _ts = _dm(temu)
    blocks = [{**FEEDBACK[0], "block_id": "md"}, FEEDBACK[1]]
    posted = client.chat_postMessage(channel=im, text="**Answer**", blocks=blocks)
    [kept] = [m for m in temu.conversation_messages(im) if m["ts"] == posted["ts"]]
    # Slack's reference: a markdown block's block_id is ignored and not retained.
    assert kept["blocks"] == FEEDBACK and kept["text"] == "**Answer**"
    assert temu.click_feedback(ann.id, im, posted["ts"])["actions"][0]["value"] == "good"

    def post(*bad: dict[str, Any], **kw: Any) -> str:
        return _refusal(lambda: client.chat_postMessage(channel=im, text="x", blocks=list(bad), **kw))

    buttons = FEEDBACK[1]["elements"][0]
    # The markdown blocks of one message hold 12,000 characters between them.
    assert post({"type": "markdown", "text": "a" * 6_000}, {"type": "markdown", "text": "b" * 6_001}) == (
        "invalid_blocks"
    )
    assert post({"type": "markdown", "text": ""}) == "invalid_blocks"
    assert post({"type": "context_actions", "elements": [buttons] * 6}) == "invalid_blocks"
    assert post({"type": "context_actions", "elements": []}) == "invalid_blocks"
    no_value = {**buttons, "negative_button": {"text": {"type": "plain_text", "text": "👎"}}}
    assert post({"type": "context_actions", "elements": [no_value]}) == "invalid_blocks"
    assert post({"type": "context_actions", "elements": [{"type": "button"}]}) == "invalid_blocks"
    assert post(*[{"type": "divider"}] * 51) == "invalid_blocks"
    assert _refusal(lambda: client.chat_update(channel=im, ts=posted["ts"], text="x", blocks=[{"x": 1}])) == (
        "invalid_blocks"
    )
    # Markdown is sent either as markdown_text or in a block, never both.
    assert _refusal(lambda: client.chat_postMessage(channel=im, markdown_text="**A**", blocks=FEEDBACK)) == (
        "markdown_text_conflict"
    )
    fits = client.chat_postMessage(channel=im, text="x", blocks=[{"type": "markdown", "text": "a" * 12_000}])
    assert fits["ok"]
