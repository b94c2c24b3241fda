"""The playground's server without a browser: its event stream and what the human does."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import aiohttp

from nanoslack.playground import Stage
from nanoslack.slack.blocks import action_id

TIMEOUT = 20.0


class Stream:
    """The page's view: the snapshot, then every event, read from /events."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp
        self.events: list[dict[str, Any]] = []

    async def until(self, predicate: Any) -> dict[str, Any]:
        async def read() -> dict[str, Any]:
            for event in self.events:
                if predicate(event):
                    return event
            while True:
                line = (await self.resp.content.readline()).decode()
                if not line.startswith("data: "):
                    continue
                event = dict(json.loads(line[6:]))
                self.events.append(event)
                if predicate(event):
                    return event

        return await asyncio.wait_for(read(), TIMEOUT)


def _from(stage: Stage, name: str, text: str) -> Any:
    uid = stage.apps[name].bot_user_id
    return lambda e: (
        e["type"] == "message" and e["message"].get("user") == uid and text in e["message"]["text"]
    )


async def test_the_stream_pushes_replies_notes_and_the_approval_to_the_page(
    served: tuple[Stage, str],
) -> None:
    stage, url = served
    async with aiohttp.ClientSession() as http, http.get(url + "events") as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        stream = Stream(resp)
        snap = await stream.until(lambda e: e["type"] == "snapshot")
        assert snap["room"] == stage.room and snap["conversations"][0]["label"] == "a2a-room"
        assert snap["conversations"][1]["id"] == stage.round_room
        assert snap["conversations"][1]["label"] == "crew-round"
        # The rooms were listed before the fleet started: the intro is room context, no drop.
        assert "dropped" not in {n["kind"] for n in snap["notes"]}

        posted = await http.post(url + "api/post", json={"channel": stage.room, "text": "@dana plan?"})
        assert (await posted.json())["ok"]
        await stream.until(_from(stage, "dana", "On it, alice"))
        await stream.until(_from(stage, "eli", "First cut"))
        await stream.until(lambda e: e["type"] == "note" and e["note"]["kind"] == "approval_requested")
        await stream.until(lambda e: e["type"] == "status" and e["status"]["pending"])

        ask = await stream.until(_from(stage, "fay", "wants to talk to"))
        dm, msg = ask["conversation"], ask["message"]
        assert dm["kind"] == "im" and dm["label"] == "fay"
        value = msg["blocks"][1]["elements"][0]["value"]
        clicked = await http.post(
            url + "api/click",
            json={"channel": dm["id"], "ts": msg["ts"], "action_id": action_id("approve"), "value": value},
        )
        assert (await clicked.json())["ok"]
        await stream.until(_from(stage, "fay", "Allowed by"))
        await stream.until(_from(stage, "fay", "Reviewed, eli"))
        await stream.until(lambda e: e["type"] == "note" and e["note"]["kind"] == "hop_limit")


async def test_a_post_without_text_is_refused(served: tuple[Stage, str]) -> None:
    stage, url = served
    async with aiohttp.ClientSession() as http:
        resp = await http.post(url + "api/post", json={"channel": stage.room, "text": "  "})
        assert resp.status == 400
        assert stage.emu.all_messages(stage.room)[-1]["text"].startswith(":wave:")


async def test_a_question_to_the_round_room_is_answered_by_the_crew_and_closed_by_danas_dispatch(
    served: tuple[Stage, str],
) -> None:
    stage, url = served
    async with aiohttp.ClientSession() as http, http.get(url + "events") as resp:
        stream = Stream(resp)
        await stream.until(lambda e: e["type"] == "snapshot")
        posted = await http.post(
            url + "api/post", json={"channel": stage.round_room, "text": "what does each of you take on?"}
        )
        question = (await posted.json())["ts"]
        await stream.until(_from(stage, "eli", "My part, the build"))
        await stream.until(_from(stage, "fay", "My part, the review"))
        await stream.until(_from(stage, "dana", "Dispatch"))
        board = await stream.until(lambda e: e["type"] == "message" and "2 open" in e["message"]["text"])
    assert board["conversation"]["label"] == "crew-round"
    replies = [m for m in stage.emu.all_messages(stage.round_room) if m.get("thread_ts") == question]
    replies = [m for m in replies if m["ts"] != question]
    assert replies[-1]["text"].startswith("Dispatch") and "→ <@" in replies[-1]["text"]
    by_user = {stage.apps[n].bot_user_id: n for n in ("dana", "eli", "fay")}
    assert sorted(by_user[m["user"]] for m in replies) == ["dana", "dana", "eli", "fay"]


async def test_the_pages_button_fires_danas_daily_plan_whose_run_shows_in_the_notes(
    served: tuple[Stage, str],
) -> None:
    stage, url = served
    async with aiohttp.ClientSession() as http, http.get(url + "events") as resp:
        stream = Stream(resp)
        await stream.until(
            lambda e: (
                e["type"] == "status"
                and any(r["name"] == "daily-plan" for r in e["status"].get("routines", []))
                or e["type"] == "snapshot"
                and any(r["name"] == "daily-plan" for r in e["status"].get("routines", []))
            )
        )
        fired = await http.post(url + "api/routine", json={"instance": "dana", "name": "daily-plan"})
        assert (await fired.json())["ok"]
        plan = await stream.until(_from(stage, "dana", "Today's plan"))
        assert plan["conversation"]["kind"] == "im"  # to the owner: alice's DM with dana
        note = await stream.until(lambda e: e["type"] == "note" and e["note"]["kind"] == "routine")
        assert note["note"]["text"] == "routine daily-plan: done"
        assert note["note"]["channel"] == plan["conversation"]["id"]


async def test_alices_remember_becomes_a_memory_note_and_the_notes_endpoint_lists_it(
    served: tuple[Stage, str],
) -> None:
    stage, url = served
    async with aiohttp.ClientSession() as http, http.get(url + "events") as resp:
        stream = Stream(resp)
        await stream.until(lambda e: e["type"] == "snapshot")
        async with http.get(url + "api/memories") as before:
            assert all(not i["notes"] for i in (await before.json())["instances"])
        ask = "@dana remember that deploys are on Thursday"
        posted = await http.post(url + "api/post", json={"channel": stage.room, "text": ask})
        asked = (await posted.json())["ts"]
        await stream.until(_from(stage, "dana", "I'll remember: deploys are on Thursday"))
        note = (await stream.until(lambda e: e["type"] == "note" and e["note"]["kind"] == "memory"))["note"]
        async with http.get(url + "api/memories") as after:
            listed = {i["name"]: i["notes"] for i in (await after.json())["instances"]}

    assert (note["ts"], note["instance"]) == (asked, "dana")
    assert note["text"] == "🧠 remembered (self): deploys are on Thursday"
    assert [(n["scope"], n["text"], n["asked_by"]) for n in listed["dana"]] == [
        ("self", "deploys are on Thursday", "alice")
    ]
    assert listed["dana"][0]["id"].startswith("m") and not listed["eli"] and not listed["fay"]
    kept = stage.fleet.store.memories.all(instance="dana")
    assert [n.ref for n in kept] == [listed["dana"][0]["id"]]


async def test_a_shared_file_is_a_file_share_message_served_to_the_page_only_where_the_human_is(
    served: tuple[Stage, str],
) -> None:
    stage, url = served
    svg = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'
    async with aiohttp.ClientSession() as http:
        shared = await http.post(
            url + "api/file",
            json={"channel": stage.room, "name": "plan.svg", "text": "@dana look", "data": _b64(svg)},
        )
        ts = (await shared.json())["ts"]
        (msg,) = [m for m in stage.emu.all_messages(stage.room) if m["ts"] == ts]
        assert msg["subtype"] == "file_share" and msg["text"] == f"<@{stage.apps['dana'].bot_user_id}> look"
        (entry,) = msg["files"]
        async with http.get(url + f"files/{entry['id']}") as resp:
            # Never a document that runs script, whatever the file says it is.
            assert resp.status == 200 and await resp.read() == svg
            assert "sandbox" in resp.headers["Content-Security-Policy"]
            assert resp.headers["Content-Disposition"] == 'attachment; filename="plan.svg"'
        # A file in a conversation alice is not in is not the page's to show.
        eli, fay = stage.apps["eli"].bot_user_id, stage.apps["fay"].bot_user_id
        elsewhere = stage.emu.create_conversation([eli, fay], kind="im").id
        other = await stage.emu.share_file(eli, elsewhere, "secret.txt", "not for alice")
        async with http.get(url + f"files/{other['files'][0]['id']}") as resp:
            assert resp.status == 404
        for body in (
            {"channel": stage.room, "name": "x.txt", "data": "not base64!"},
            {"channel": stage.room, "name": "empty.txt", "data": ""},
            {"channel": stage.room, "data": _b64(b"no name")},
        ):
            refused = await http.post(url + "api/file", json=body)
            assert refused.status == 400 and not (await refused.json())["ok"]
    assert [m["ts"] for m in stage.emu.all_messages(stage.room) if m.get("subtype") == "file_share"] == [ts]


async def test_opening_a_bots_dm_is_its_messages_tab_whose_prompts_reach_the_page(
    served: tuple[Stage, str],
) -> None:
    stage, url = served
    async with aiohttp.ClientSession() as http, http.get(url + "events") as resp:
        stream = Stream(resp)
        snap = await stream.until(lambda e: e["type"] == "snapshot")
        assert snap["prompts"] == {}  # set when alice opens the DM, as in Slack
        (dm,) = [c["id"] for c in snap["conversations"] if c["kind"] == "im" and c["label"] == "dana"]
        opened = await http.post(url + "api/dm/open", json={"channel": dm})
        assert (await opened.json()) == {"ok": True, "bot": "dana"}
        event = await stream.until(lambda e: e["type"] == "prompts" and dm in e["prompts"])
        # Only a bot's DM with alice is a Messages tab: a room is refused, and nothing is sent.
        refused = await http.post(url + "api/dm/open", json={"channel": stage.room})
        assert refused.status == 400 and not (await refused.json())["ok"]
    assert event["prompts"][dm]["prompts"] == [
        {"title": "Plan my day", "message": "Plan my day"},
        {"title": "What is blocked?", "message": "What is blocked?"},
    ]
    # An agent's DM: set on the DM itself, no thread_ts (docs/agent-surface.md).
    calls = [c for c in stage.emu.engine.api_calls if c.method == "assistant.threads.setSuggestedPrompts"]
    assert [(c.params.get("channel_id"), c.params.get("thread_ts")) for c in calls] == [(dm, None)]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
