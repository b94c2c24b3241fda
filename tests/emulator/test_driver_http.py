"""The HTTP driver API, its sync client, the workspace file and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from slack_sdk import WebClient

from nanoslack.emulator import EmulatorClient, EmulatorClientError, ThreadedEmulator, sample_workspace


def test_http_driver_client_exposes_driver_operations(temu: ThreadedEmulator) -> None:
    drv = EmulatorClient(temu.base_url)
    alice = drv.add_user("alice", real_name="Alice")
    dana = drv.add_app("dana")
    conv = drv.create_conversation([alice["id"], dana["bot_user_id"]], kind="im")
    assert conv["id"].startswith("D")
    ts = drv.post_as_user(alice["id"], conv["id"], "hello")
    drv.bulk_post(alice["id"], conv["id"], count=3, text="bulk")
    root = drv.conversation_messages(conv["id"])
    assert [m["text"] for m in root] == ["hello", "bulk 0", "bulk 1", "bulk 2"]
    assert root[0]["ts"] == ts and root[0]["replies"] == []
    drv.post_as_user(alice["id"], conv["id"], "reply", thread_ts=ts)
    assert len(drv.all_messages(conv["id"])) == 5
    drv.fail_next("auth.test", n=1, error="invalid_auth")
    c = WebClient(token=dana["bot_token"], base_url=temu.api_url)
    try:
        c.auth_test()
    except Exception as e:  # noqa: BLE001
        assert "invalid_auth" in str(e)
    assert drv.api_calls[-1]["error"] == "invalid_auth"
    assert drv.stats(dana["app_id"])["queued"] == 5
    assert drv.stats()["queued"] == 5
    assert drv.connections(dana["app_id"]) == 0
    drv.react(alice["id"], conv["id"], ts, ":eyes:")
    temu.react("alice", conv["id"], ts, "tada")
    assert drv.conversation_messages(conv["id"])[0]["reactions"] == [
        {"name": "eyes", "users": [alice["id"]], "count": 1},
        {"name": "tada", "users": [alice["id"]], "count": 1},
    ]
    assert drv.stats(dana["app_id"])["queued"] == 7  # two reaction_added events for dana
    with pytest.raises(EmulatorClientError, match="already_reacted"):
        drv.react(alice["id"], conv["id"], ts, "eyes")
    drv.withhold_acks(dana["app_id"], 1)
    assert drv.drop_sockets(dana["app_id"]) == 0
    assert drv.send_disconnect(dana["app_id"]) == 0
    ws = drv.workspace()
    assert {a["name"] for a in ws["apps"]} == {"dana"}


def test_sample_workspace_has_alice_three_apps_and_an_mpim() -> None:
    spec = sample_workspace()
    assert [u["name"] for u in spec["users"]] == ["alice"]
    assert [a["name"] for a in spec["apps"]] == ["dana", "eli", "fay"]
    assert spec["conversations"][0]["members"] == ["alice", "dana", "eli", "fay"]


@pytest.mark.parametrize(
    "entry", [["-m", "nanoslack.emulator"], ["-m", "nanoslack", "emulator"]], ids=["module", "nanoslack-cli"]
)
def test_cli_serves_a_workspace_file_with_fixed_tokens(tmp_path: Path, entry: list[str]) -> None:
    spec = {
        "team": {"id": "T0TEST", "name": "test-team"},
        "users": [{"name": "alice", "id": "U0ALICE"}],
        "apps": [
            {
                "name": "dana",
                "app_id": "A0DANA",
                "bot_id": "B0DANA",
                "bot_user_id": "U0DANA",
                "bot_token": "xoxb-emu-dana-fixed",
                "app_token": "xapp-emu-dana-fixed",
            }
        ],
        "conversations": [{"kind": "im", "members": ["alice", "dana"], "id": "D0ALICEDANA"}],
    }
    f = tmp_path / "ws.json"
    f.write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    proc = subprocess.Popen(
        [sys.executable, *entry, "--workspace", str(f), "--json"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        assert info["apps"][0]["bot_token"] == "xoxb-emu-dana-fixed"
        c = WebClient(token="xoxb-emu-dana-fixed", base_url=info["api_url"])
        r = c.auth_test()
        assert r["user_id"] == "U0DANA" and r["team_id"] == "T0TEST"
        c.chat_postMessage(channel="D0ALICEDANA", text="hi alice")
        drv = EmulatorClient(info["base_url"])
        assert drv.conversation_messages("D0ALICEDANA")[0]["text"] == "hi alice"
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


def test_http_driver_shares_files_and_edits_and_deletes_as_a_person(temu: ThreadedEmulator) -> None:
    drv = EmulatorClient(temu.base_url)
    alice, dana = drv.add_user("alice"), drv.add_app("dana")
    conv = drv.create_conversation([alice["id"], dana["bot_user_id"]], kind="im")
    shot = drv.share_file(alice["id"], conv["id"], "shot.png", b"\x89PNG\x00", text="look")
    assert shot["subtype"] == "file_share" and shot["files"][0]["size"] == 5
    assert temu.file_content(shot["files"][0]["id"]) == b"\x89PNG\x00"
    drv.set_file_fault(shot["files"][0]["id"], "refused")
    ts = drv.post_as_user(alice["id"], conv["id"], "typo")
    assert drv.edit_as_user(alice["id"], conv["id"], ts, "fixed")["text"] == "fixed"
    drv.delete_as_user(alice["id"], conv["id"], ts)
    assert [m["text"] for m in drv.all_messages(conv["id"])] == ["look"]


def test_http_driver_drives_the_agent_platform(temu: ThreadedEmulator) -> None:
    drv = EmulatorClient(temu.base_url)
    alice, dana = drv.add_user("alice"), drv.add_app("dana")
    im = drv.create_conversation([alice["id"], dana["bot_user_id"]], kind="im")["id"]
    ts = drv.post_as_user(alice["id"], im, "go")
    web = WebClient(token=dana["bot_token"], base_url=temu.api_url)
    web.agents_sessions_setStatus(channel_id=im, thread_ts=ts, status="processing")
    assert drv.session(im, ts)["status"] == "processing"  # type: ignore[index]
    assert drv.click_stop(alice["id"], im, ts)["type"] == "agent_session_stopped"
    button = {"type": "button", "action_id": "run", "text": {"type": "plain_text", "text": "Run"}}
    web.views_publish(
        user_id=alice["id"], view={"type": "home", "blocks": [{"type": "actions", "elements": [button]}]}
    )
    assert drv.home_view("dana", alice["id"])["type"] == "home"  # type: ignore[index]
    assert drv.open_app_home(alice["id"], "dana")["view"]["type"] == "home"
    assert drv.click_home_button(alice["id"], "dana", "run")["actions"][0]["action_id"] == "run"
    assert drv.change_app_context("dana")["context"] == {}
    blocks = [
        {
            "type": "context_actions",
            "elements": [
                {
                    "type": "feedback_buttons",
                    "action_id": "fb",
                    "positive_button": {"text": {"type": "plain_text", "text": "👍"}, "value": "up"},
                    "negative_button": {"text": {"type": "plain_text", "text": "👎"}, "value": "down"},
                }
            ],
        }
    ]
    reply = web.chat_postMessage(channel=im, thread_ts=ts, text="done", blocks=blocks)["ts"]
    assert drv.click_feedback(alice["id"], im, reply)["actions"][0]["value"] == "up"
    assert drv.click_feedback(alice["id"], im, reply, positive=False)["actions"][0]["value"] == "down"
