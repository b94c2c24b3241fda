"""Web API behaviour against the real slack-sdk clients."""

from __future__ import annotations

import json
import urllib.request

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from nanoslack.emulator import Emulator, ThreadedEmulator


def _client(temu: ThreadedEmulator, token: str, **kw: object) -> WebClient:
    return WebClient(token=token, base_url=temu.api_url, **kw)  # type: ignore[arg-type]


def test_auth_test_returns_bot_identity(temu: ThreadedEmulator) -> None:
    dana = temu.add_app("dana")
    r = _client(temu, dana.bot_token).auth_test()
    assert r["user_id"] == dana.bot_user_id
    assert r["bot_id"] == dana.bot_id
    assert r["team_id"] and r["team"] and r["url"] and r["user"] == "dana"


def test_tokens_do_not_look_like_real_slack_tokens(temu: ThreadedEmulator) -> None:
    import re

    dana = temu.add_app("dana")
    real = re.compile(r"xox[abp]-\d+-\d+-[A-Za-z0-9]+")
    assert not real.fullmatch(dana.bot_token)
    assert dana.bot_token.startswith("xoxb-") and dana.app_token.startswith("xapp-")


def test_bad_or_missing_token_and_app_token_rules(temu: ThreadedEmulator) -> None:
    dana = temu.add_app("dana")
    with pytest.raises(SlackApiError) as e:
        _client(temu, "xoxb-nope").auth_test()
    assert e.value.response["error"] == "invalid_auth"
    with pytest.raises(SlackApiError) as e:
        WebClient(base_url=temu.api_url).api_call("auth.test")
    assert e.value.response["error"] == "not_authed"
    with pytest.raises(SlackApiError) as e:
        _client(temu, dana.app_token).auth_test()
    assert e.value.response["error"] == "not_allowed_token_type"
    with pytest.raises(SlackApiError) as e:
        _client(temu, dana.bot_token).apps_connections_open(app_token=dana.bot_token)
    assert e.value.response["error"] == "not_allowed_token_type"
    with pytest.raises(SlackApiError) as e:
        _client(temu, dana.bot_token).api_call("no.such.method")
    assert e.value.response["error"] == "unknown_method"
    url = _client(temu, dana.app_token).apps_connections_open(app_token=dana.app_token)["url"]
    assert url.startswith(f"ws://127.0.0.1:{temu.port}/link/?ticket=") and dana.app_id in url


def test_responses_are_json_and_token_param_works(temu: ThreadedEmulator) -> None:
    dana = temu.add_app("dana")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{temu.api_url}auth.test?token={dana.bot_token}") as resp:
        assert resp.headers["Content-Type"].startswith("application/json")
        assert json.loads(resp.read())["ok"] is True
    calls = temu.api_calls
    assert all("token" not in c.params for c in calls)


def test_post_message_form_and_json_bodies_and_threads(temu: ThreadedEmulator) -> None:
    alice = temu.add_user("alice")
    dana = temu.add_app("dana")
    eli = temu.add_app("eli")
    conv = temu.create_conversation([alice.id, dana.bot_user_id, eli.bot_user_id], kind="mpim")
    c = _client(temu, dana.bot_token)
    # chat.postMessage goes as JSON; api_call with data= sends a form body
    parent = c.chat_postMessage(channel=conv.id, text="parent")
    form = c.api_call(
        "chat.postMessage", data={"channel": conv.id, "text": "reply", "thread_ts": parent["ts"]}
    )
    assert form["message"]["thread_ts"] == parent["ts"]
    assert form["message"]["parent_user_id"] == dana.bot_user_id
    assert float(form["ts"]) > float(parent["ts"])
    h = temu.add_user("bob")
    with pytest.raises(SlackApiError) as e:
        c.chat_postMessage(channel=conv.id, text="x", thread_ts="1.000001")
    assert e.value.response["error"] == "thread_not_found"
    with pytest.raises(SlackApiError) as e:
        c.chat_postMessage(channel="C0NOPE", text="x")
    assert e.value.response["error"] == "channel_not_found"
    other = temu.create_conversation([h.id, eli.bot_user_id, alice.id], kind="mpim")
    with pytest.raises(SlackApiError) as e:
        c.chat_postMessage(channel=other.id, text="x")
    assert e.value.response["error"] in ("channel_not_found", "not_in_channel")
    msgs = temu.conversation_messages(conv.id)
    assert [m["text"] for m in msgs] == ["parent"]
    assert msgs[0]["reply_count"] == 1 and msgs[0]["latest_reply"] == form["ts"]
    assert msgs[0]["reply_users"] == [dana.bot_user_id]
    assert [r["text"] for r in msgs[0]["replies"]] == ["reply"]
    assert [m["text"] for m in temu.all_messages(conv.id)] == ["parent", "reply"]


def test_message_ts_are_unique_and_increasing(temu: ThreadedEmulator) -> None:
    alice = temu.add_user("alice")
    dana = temu.add_app("dana")
    conv = temu.create_conversation([alice.id, dana.bot_user_id], kind="im")
    tss = [temu.post_as_user(alice.id, conv.id, f"m{i}") for i in range(50)]
    assert len(set(tss)) == 50
    assert all(float(a) < float(b) for a, b in zip(tss, tss[1:], strict=False))
    assert all(len(t.split(".")[1]) == 6 for t in tss)


def test_metadata_round_trips_through_conversations_replies(temu: ThreadedEmulator) -> None:
    alice = temu.add_user("alice")
    dana = temu.add_app("dana")
    eli = temu.add_app("eli")
    conv = temu.create_conversation([alice.id, dana.bot_user_id, eli.bot_user_id])
    c = _client(temu, dana.bot_token)
    root = temu.post_as_user(alice.id, conv.id, "task")
    meta = {"event_type": "a2a_hop", "event_payload": {"hop": 2, "origin": "x"}}
    r = c.chat_postMessage(channel=conv.id, text="answer", thread_ts=root, metadata=meta)
    with_meta = c.conversations_replies(channel=conv.id, ts=root, include_all_metadata=True)
    assert with_meta["messages"][0]["ts"] == root
    assert with_meta["messages"][1]["ts"] == r["ts"]
    assert with_meta["messages"][1]["metadata"] == meta
    without = c.conversations_replies(channel=conv.id, ts=root)
    assert "metadata" not in without["messages"][1]
    hist = c.conversations_history(channel=conv.id, include_all_metadata="1")
    assert hist["messages"][0]["ts"] == root
    assert temu.conversation_messages(conv.id)[0]["replies"][0]["metadata"] == meta


def test_conversations_open_rules(temu: ThreadedEmulator) -> None:
    alice = temu.add_user("alice")
    bob = temu.add_user("bob")
    dana = temu.add_app("dana")
    eli = temu.add_app("eli")
    c = _client(temu, dana.bot_token)
    im = c.conversations_open(users=alice.id)
    assert im["channel"]["id"].startswith("D")
    again = c.conversations_open(users=[alice.id])
    assert again["channel"]["id"] == im["channel"]["id"] and again["already_open"] is True
    with pytest.raises(SlackApiError) as e:
        c.conversations_open(users=eli.bot_user_id)
    assert e.value.response["error"] == "cannot_dm_bot"
    mp = c.conversations_open(users=[alice.id, eli.bot_user_id])
    mid = mp["channel"]["id"]
    assert mid.startswith("C")
    info = c.conversations_info(channel=mid)["channel"]
    assert info["is_mpim"] is True and info["is_member"] is True
    members = set(c.conversations_members(channel=mid)["members"])
    assert members == {alice.id, eli.bot_user_id, dana.bot_user_id}
    same = c.conversations_open(users=f"{eli.bot_user_id},{alice.id}")
    assert same["channel"]["id"] == mid and same["already_open"] is True
    with pytest.raises(SlackApiError) as e:
        c.conversations_open(users="U0NOBODY")
    assert e.value.response["error"] == "user_not_found"
    many = [temu.add_user(f"u{i}").id for i in range(9)]
    with pytest.raises(SlackApiError) as e:
        c.conversations_open(users=many)
    assert e.value.response["error"] == "too_many_users"
    with pytest.raises(SlackApiError) as e:
        c.conversations_info(channel="C0NOPE")
    assert e.value.response["error"] == "channel_not_found"
    # a human-only group DM is invisible to the app
    hum = temu.create_conversation([alice.id, bob.id, temu.add_user("carol").id])
    with pytest.raises(SlackApiError):
        c.conversations_history(channel=hum.id)


@pytest.mark.emulator(mpim_prefix="G")
def test_mpim_prefix_can_be_g(temu: ThreadedEmulator) -> None:
    users = [temu.add_user(n).id for n in ("a", "b", "c")]
    assert temu.create_conversation(users, kind="mpim").id.startswith("G")


def test_users_info_bots_info_reactions_and_update(temu: ThreadedEmulator) -> None:
    alice = temu.add_user("alice", real_name="Alice")
    dana = temu.add_app("dana")
    conv = temu.create_conversation([alice.id, dana.bot_user_id], kind="im")
    c = _client(temu, dana.bot_token)
    u = c.users_info(user=alice.id)["user"]
    assert u["real_name"] == "Alice" and u["is_bot"] is False
    b = c.users_info(user=dana.bot_user_id)["user"]
    assert b["is_bot"] is True and b["profile"]["bot_id"] == dana.bot_id
    with pytest.raises(SlackApiError) as e:
        c.users_info(user="U0NOPE")
    assert e.value.response["error"] == "user_not_found"
    bot = c.bots_info(bot=dana.bot_id)["bot"]
    assert bot["app_id"] == dana.app_id and bot["user_id"] == dana.bot_user_id
    ts = c.chat_postMessage(channel=conv.id, text="v1")["ts"]
    c.reactions_add(channel=conv.id, timestamp=ts, name="eyes")
    with pytest.raises(SlackApiError) as e:
        c.reactions_add(channel=conv.id, timestamp=ts, name="eyes")
    assert e.value.response["error"] == "already_reacted"
    with pytest.raises(SlackApiError) as e:
        c.reactions_add(channel=conv.id, timestamp="1.2", name="eyes")
    assert e.value.response["error"] == "message_not_found"
    up = c.chat_update(channel=conv.id, ts=ts, text="v2")
    assert up["text"] == "v2"
    assert temu.conversation_messages(conv.id)[0]["text"] == "v2"
    human_ts = temu.post_as_user(alice.id, conv.id, "mine")
    with pytest.raises(SlackApiError) as e:
        c.chat_update(channel=conv.id, ts=human_ts, text="hacked")
    assert e.value.response["error"] == "cant_update_message"


def test_ratelimited_429_is_retried_by_rate_limit_retry_handler(temu: ThreadedEmulator) -> None:
    dana = temu.add_app("dana")
    alice = temu.add_user("alice")
    conv = temu.create_conversation([alice.id, dana.bot_user_id], kind="im")
    temu.fail_next("chat.postMessage", n=1, error="ratelimited", retry_after=0)
    c = _client(temu, dana.bot_token, retry_handlers=[RateLimitErrorRetryHandler(max_retry_count=2)])
    r = c.chat_postMessage(channel=conv.id, text="after 429")
    assert r["ok"] is True
    calls = [x for x in temu.api_calls if x.method == "chat.postMessage"]
    assert [x.status for x in calls] == [429, 200]
    assert calls[0].error == "ratelimited" and calls[0].app_name == "dana"


def test_ratelimited_without_retry_handler_raises_with_retry_after(temu: ThreadedEmulator) -> None:
    dana = temu.add_app("dana")
    temu.fail_next("auth.test", n=1, retry_after=7)
    with pytest.raises(SlackApiError) as e:
        _client(temu, dana.bot_token).auth_test()
    assert e.value.response.status_code == 429
    assert e.value.response.headers["Retry-After"] == "7"
    assert e.value.response["error"] == "ratelimited"
    temu.fail_next("auth.test", n=1, error="internal_error")
    with pytest.raises(SlackApiError) as e:
        _client(temu, dana.bot_token).auth_test()
    assert e.value.response.status_code == 200 and e.value.response["error"] == "internal_error"
    assert _client(temu, dana.bot_token).auth_test()["ok"]


async def test_async_web_client_get_reads(emu: Emulator) -> None:
    alice = emu.add_user("alice")
    dana = emu.add_app("dana")
    eli = emu.add_app("eli")
    conv = emu.create_conversation([alice.id, dana.bot_user_id, eli.bot_user_id])
    root = await emu.post_as_user(alice.id, conv.id, f"hi <@{dana.bot_user_id}>")
    await emu.post_as_user(alice.id, conv.id, "in thread", thread_ts=root)
    c = AsyncWebClient(token=dana.bot_token, base_url=emu.api_url)
    hist = await c.conversations_history(channel=conv.id, limit=10)
    assert [m["ts"] for m in hist["messages"]] == [root]
    msg = hist["messages"][0]
    assert msg["client_msg_id"] and msg["blocks"][0]["type"] == "rich_text"
    els = msg["blocks"][0]["elements"][0]["elements"]
    assert {"type": "user", "user_id": dana.bot_user_id} in els
    reps = await c.conversations_replies(channel=conv.id, ts=root)
    assert [m["text"] for m in reps["messages"]] == [f"hi <@{dana.bot_user_id}>", "in thread"]
    info = await c.conversations_info(channel=conv.id)
    assert info["channel"]["id"] == conv.id
    u = await c.users_info(user=alice.id)
    assert u["user"]["name"] == "alice"
    gets = [x for x in emu.api_calls if x.method == "conversations.history"]
    assert gets and gets[0].params["channel"] == conv.id
