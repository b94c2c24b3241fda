"""kill -9 of the fleet, then a restart: every recorded event is delivered once (docs/architecture.md).

The first run SIGKILLs itself at a failpoint (``nanoslack.failpoints``): right
after a batch's transaction committed but before anything was logged, or right
after the inbox commit but before the envelopes were acked. The second run must
finish the work: resume what the inbox holds, take Slack's redeliveries of what
was never acked, and deliver nothing twice.
"""

from __future__ import annotations

import signal
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from nanoslack.emulator import Emulator
from nanoslack.fleetproc import FleetProcess
from nanoslack.store import Store, sqlite_url
from nanoslack.testing.fleet_env import scalar, sql, write_fleet_env

MESSAGES = 600


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
    return Counter(str(r[0]) for r in sql(db, "SELECT ts FROM test_deliveries WHERE instance = 'dana'"))


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
    env_file = write_fleet_env(
        tmp_path / ".env",
        emu,
        [dana],
        db,
        SLACK_A2A_ROOMS=room.id,
        SLACK_OWNER=alice.id,
        LOG_LEVEL="debug",
        LOG_FORMAT="json",
    )
    _count_deliveries(db)
    first = FleetProcess.start(env_file, failpoints=failpoint)
    await emu.wait_for(lambda: emu.connections(dana.app_id) >= 1, timeout=30)
    texts = [f"<@{dana.bot_user_id}> n{i}" for i in range(MESSAGES)]
    posted = await emu.bulk_post(alice.id, room.id, texts)
    code = await first.wait(30)
    assert code == -signal.SIGKILL, "the failpoint did not fire"

    second = FleetProcess.start(env_file)
    try:
        done_sql = "SELECT count(*) FROM inbox WHERE instance='dana' AND status='done'"
        await emu.wait_for(lambda: scalar(db, done_sql) == len(posted), timeout=60)
        await second.wait_for_event("fleet started")
    finally:
        code = await second.stop()
    assert code == 0

    runs = [first.events("message processed"), second.events("message processed")]
    deliveries = Counter(e["ts"] for run in runs for e in run if e["status"] == "processed")
    assert set(deliveries) <= set(posted)
    assert not [ts for ts, n in deliveries.items() if n > 1], "a message went downstream twice"
    downstream = _deliveries(db)
    twice = sorted(ts for ts, n in downstream.items() if n > 1)
    assert not twice, f"{len(twice)} messages went downstream twice, e.g. {twice[:3]}"
    assert set(downstream) == set(posted)
    pending = "SELECT count(*) FROM messages WHERE instance='dana' AND status IN ('pending', 'done')"
    assert scalar(db, pending) == len(posted)
    assert scalar(db, "SELECT count(*) FROM inbox WHERE instance='dana'") == len(posted)
    # The second run had real work left: resumed from the inbox or redelivered by Slack.
    assert runs[1]


async def test_a_post_made_just_before_a_crash_is_found_not_repeated(emu: Emulator, tmp_path: Path) -> None:
    """Killed after Slack accepted the approval DM but before the outbox recorded it:
    the restarted fleet finds the DM by its metadata and does not send it again."""
    alice = emu.add_user("alice")
    dana, eli = emu.add_app("dana"), emu.add_app("eli")
    room = emu.create_conversation([alice.id, dana.bot_user_id, eli.bot_user_id])
    db = tmp_path / "data" / "nanoslack.db"
    env_file = write_fleet_env(
        tmp_path / ".env", emu, [dana], db, SLACK_A2A_ROOMS=room.id, SLACK_OWNER=alice.id, LOG_FORMAT="json"
    )
    fleet = FleetProcess.start(env_file, failpoints="outbox.posted=kill@1")
    await emu.wait_for(lambda: emu.connections(dana.app_id) >= 1, timeout=30)
    from slack_sdk.web.async_client import AsyncWebClient

    eli_client = AsyncWebClient(token=eli.bot_token, base_url=emu.api_url)
    await eli_client.chat_postMessage(channel=room.id, text=f"<@{dana.bot_user_id}> may I join?")
    assert await fleet.wait(30) == -signal.SIGKILL

    def approval_dms() -> list[dict[str, object]]:
        return [
            m
            for conv in emu.conversations()
            if conv.kind == "im" and alice.id in conv.members
            for m in emu.conversation_messages(conv.id)
            if m.get("bot_id") == dana.bot_id
        ]

    assert len(approval_dms()) == 1
    fleet = FleetProcess.start(env_file)
    try:
        await fleet.wait_for_event("post recovered: already posted")
        sent = "SELECT count(*) FROM outbox WHERE status = 'sent' AND purpose = 'ask'"
        assert scalar(db, sent) == 1
    finally:
        assert await fleet.stop() == 0
    assert len(approval_dms()) == 1
