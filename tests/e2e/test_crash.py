"""kill -9 of the fleet, then a restart: every recorded event is delivered once (§8)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from nanoslack.emulator import Emulator
from tests.e2e.conftest import env_lines

ROOT = Path(__file__).resolve().parents[2]


def _start_fleet(env_file: Path, log_file: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLACK_")}
    return subprocess.Popen(
        [sys.executable, "-m", "nanoslack", "run", "--env-file", str(env_file)],
        cwd=env_file.parent,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log_file.open("wb"),
    )


def _processed(log_file: Path) -> list[dict[str, str]]:
    events = []
    for line in log_file.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line) if line.startswith("{") else None
        except ValueError:  # the last line of a log still being written
            continue
        if event and event.get("event") == "message processed":
            events.append(event)
    return events


async def test_fleet_killed_with_sigkill_delivers_each_recorded_event_once_after_restart(tmp_path: Path) -> None:
    async with Emulator(ack_timeout=1.0) as emu:
        alice = emu.add_user("alice")
        dana = emu.add_app("dana")
        room = emu.create_conversation([alice.id, dana.bot_user_id, emu.add_app("eli").bot_user_id])
        db = tmp_path / "data" / "nanoslack.db"
        env_file = tmp_path / ".env"
        env_file.write_text(
            env_lines(emu, [dana], db, SLACK_A2A_ROOMS=room.id, SLACK_OWNER=alice.id,
                      LOG_LEVEL="debug", LOG_FORMAT="json")
        )
        first_log, second_log = tmp_path / "run1.log", tmp_path / "run2.log"
        fleet = _start_fleet(env_file, first_log)
        try:
            await emu.wait_for(lambda: emu.connections(dana.app_id) >= 1, timeout=30)
            posted = await emu.bulk_post(alice.id, room.id, [f"<@{dana.bot_user_id}> n{i}" for i in range(400)])
            # Kill in the thick of it: some events processed, more recorded, some unacked.
            await emu.wait_for(lambda: len(_processed(first_log)) >= 30, timeout=30)
        finally:
            fleet.send_signal(signal.SIGKILL)
            fleet.wait(timeout=10)
        assert fleet.returncode == -signal.SIGKILL

        fleet = _start_fleet(env_file, second_log)
        try:
            def all_done() -> bool:
                import sqlite3

                conn = sqlite3.connect(db, timeout=5)
                try:
                    rows = conn.execute(
                        "SELECT count(*) FROM inbox WHERE instance='dana' AND status='done'"
                    ).fetchone()
                finally:
                    conn.close()
                return bool(rows and rows[0] == len(posted))

            await emu.wait_for(all_done, timeout=60)
        finally:
            fleet.send_signal(signal.SIGTERM)
            await asyncio.to_thread(fleet.wait, 15)
        assert fleet.returncode == 0

    deliveries = Counter(e["ts"] for e in _processed(first_log) + _processed(second_log) if e["status"] == "delivered")
    assert set(deliveries) <= set(posted)
    assert not [ts for ts, n in deliveries.items() if n > 1], "a message went downstream twice"
    import sqlite3

    conn = sqlite3.connect(db)
    pending = conn.execute("SELECT count(*) FROM messages WHERE instance='dana' AND status='pending'").fetchone()
    conn.close()
    assert pending == (len(posted),)
    # The kill really interrupted work: the first run finished some, the second the rest.
    assert 0 < len(_processed(first_log)) < len(posted)
    assert len(_processed(second_log)) > 0
