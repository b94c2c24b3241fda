"""kill -9 of the fleet, then a restart: every recorded event is delivered once (§8).

The first run SIGKILLs itself at a failpoint (``nanoslack.failpoints``): right
after a batch's transaction committed but before anything was logged, or right
after the inbox commit but before the envelopes were acked. The second run must
finish the work: resume what the inbox holds, take Slack's redeliveries of what
was never acked, and deliver nothing twice.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from nanoslack.emulator import Emulator
from nanoslack.store import Store, sqlite_url
from tests.e2e.conftest import env_lines

MESSAGES = 600


def _start_fleet(env_file: Path, log_file: Path, failpoints: str = "") -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "NANOSLACK_"))}
    if failpoints:
        env["NANOSLACK_FAILPOINTS"] = failpoints
    return subprocess.Popen(
        [sys.executable, "-m", "nanoslack", "run", "--env-file", str(env_file)],
        cwd=env_file.parent,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log_file.open("wb"),
    )


def _events(log_file: Path, name: str) -> list[dict[str, str]]:
    events = []
    for line in log_file.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line) if line.startswith("{") else None
        except ValueError:  # the last line of a log still being written
            continue
        if event and event.get("event") == name:
            events.append(event)
    return events


def _count_deliveries(db: Path) -> None:
    """A row per attempt to hand a message downstream (the gate's pending insert),
    written by a trigger inside the pipeline's own transaction.

    The tables themselves ignore a duplicate insert, and a batch committed just
    before the SIGKILL logs nothing: a redelivery of it would show nowhere else.
    BEFORE INSERT fires even for an insert that ``ON CONFLICT DO NOTHING`` skips.
    """
    Store.open(sqlite_url(str(db))).close()  # the fleet's schema, created before the fleet runs
    conn = sqlite3.connect(db, timeout=5)
    try:
        conn.executescript(
            """
            CREATE TABLE test_deliveries (instance TEXT, ts TEXT);
            CREATE TRIGGER test_count_deliveries BEFORE INSERT ON messages
            WHEN NEW.status = 'pending'
            BEGIN INSERT INTO test_deliveries VALUES (NEW.instance, NEW.ts); END;
            """
        )
    finally:
        conn.close()


def _deliveries(db: Path) -> Counter[str]:
    conn = sqlite3.connect(db, timeout=5)
    try:
        rows = conn.execute("SELECT ts FROM test_deliveries WHERE instance = 'dana'")
        return Counter(str(r[0]) for r in rows)
    finally:
        conn.close()


def _scalar(db: Path, sql: str) -> int:
    conn = sqlite3.connect(db, timeout=5)
    try:
        return int(conn.execute(sql).fetchone()[0])
    finally:
        conn.close()


@pytest.mark.parametrize(
    "failpoint",
    ["pipeline.committed=kill@150", "inbox.recorded=kill@200"],
    ids=["after-commit", "before-ack"],
)
async def test_fleet_killed_with_sigkill_delivers_each_recorded_event_once_after_restart(
    emu: Emulator, tmp_path: Path, failpoint: str
) -> None:
    alice = emu.add_user("alice")
    dana = emu.add_app("dana")
    room = emu.create_conversation([alice.id, dana.bot_user_id, emu.add_app("eli").bot_user_id])
    db = tmp_path / "data" / "nanoslack.db"
    env_file = tmp_path / ".env"
    env_file.write_text(
        env_lines(
            emu,
            [dana],
            db,
            SLACK_A2A_ROOMS=room.id,
            SLACK_OWNER=alice.id,
            LOG_LEVEL="debug",
            LOG_FORMAT="json",
        )
    )
    first_log, second_log = tmp_path / "run1.log", tmp_path / "run2.log"
    _count_deliveries(db)
    fleet = _start_fleet(env_file, first_log, failpoint)
    await emu.wait_for(lambda: emu.connections(dana.app_id) >= 1, timeout=30)
    texts = [f"<@{dana.bot_user_id}> n{i}" for i in range(MESSAGES)]
    posted = await emu.bulk_post(alice.id, room.id, texts)
    code = await asyncio.to_thread(fleet.wait, 30)
    assert code == -signal.SIGKILL, "the failpoint did not fire"

    fleet = _start_fleet(env_file, second_log)
    try:
        done_sql = "SELECT count(*) FROM inbox WHERE instance='dana' AND status='done'"
        await emu.wait_for(lambda: _scalar(db, done_sql) == len(posted), timeout=60)
        await emu.wait_for(lambda: _events(second_log, "fleet started"), timeout=30)
    finally:
        fleet.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(fleet.wait, 15)
    assert code == 0

    runs = [_events(first_log, "message processed"), _events(second_log, "message processed")]
    deliveries = Counter(e["ts"] for run in runs for e in run if e["status"] == "processed")
    assert set(deliveries) <= set(posted)
    assert not [ts for ts, n in deliveries.items() if n > 1], "a message went downstream twice"
    downstream = _deliveries(db)
    twice = sorted(ts for ts, n in downstream.items() if n > 1)
    assert not twice, f"{len(twice)} messages went downstream twice, e.g. {twice[:3]}"
    assert set(downstream) == set(posted)
    pending = "SELECT count(*) FROM messages WHERE instance='dana' AND status IN ('pending', 'done')"
    assert _scalar(db, pending) == len(posted)
    assert _scalar(db, "SELECT count(*) FROM inbox WHERE instance='dana'") == len(posted)
    # The second run had real work left: resumed from the inbox or redelivered by Slack.
    assert runs[1]


async def test_a_post_made_just_before_a_crash_is_found_not_repeated(emu: Emulator, tmp_path: Path) -> None:
    """Killed after Slack accepted the approval DM but before the outbox recorded it:
    the restarted fleet finds the DM by its metadata and does not send it again."""
    alice = emu.add_user("alice")
    dana, eli = emu.add_app("dana"), emu.add_app("eli")
    room = emu.create_conversation([alice.id, dana.bot_user_id, eli.bot_user_id])
    db = tmp_path / "data" / "nanoslack.db"
    env_file = tmp_path / ".env"
    env_file.write_text(
        env_lines(emu, [dana], db, SLACK_A2A_ROOMS=room.id, SLACK_OWNER=alice.id, LOG_FORMAT="json")
    )
    fleet = _start_fleet(env_file, tmp_path / "run1.log", "outbox.posted=kill@1")
    await emu.wait_for(lambda: emu.connections(dana.app_id) >= 1, timeout=30)
    from slack_sdk.web.async_client import AsyncWebClient

    eli_client = AsyncWebClient(token=eli.bot_token, base_url=emu.api_url)
    await eli_client.chat_postMessage(channel=room.id, text=f"<@{dana.bot_user_id}> may I join?")
    assert await asyncio.to_thread(fleet.wait, 30) == -signal.SIGKILL

    def approval_dms() -> list[dict[str, object]]:
        return [
            m
            for conv in emu.conversations()
            if conv.kind == "im" and alice.id in conv.members
            for m in emu.conversation_messages(conv.id)
            if m.get("bot_id") == dana.bot_id
        ]

    assert len(approval_dms()) == 1
    second_log = tmp_path / "run2.log"
    fleet = _start_fleet(env_file, second_log)
    try:
        await emu.wait_for(lambda: _events(second_log, "post recovered: already posted"), timeout=30)
        sent = "SELECT count(*) FROM outbox WHERE status = 'sent' AND purpose = 'ask'"
        assert _scalar(db, sent) == 1
    finally:
        fleet.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(fleet.wait, 15) == 0
    assert len(approval_dms()) == 1
