"""SIGTERM stops ``nanoslack run`` cleanly (docs/operations.md): no new envelope is
read, the turns under way finish within NANOSLACK_SHUTDOWN_GRACE and their posts are
sent, the rest is left for the next start; a second SIGTERM stops at once."""

from __future__ import annotations

import os
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

from nanoslack.fleetproc import FleetProcess
from nanoslack.testing.fleet_env import write_fleet_env
from tests.e2e.conftest import Room

# Thinks for a while (``slow`` says how long, in seconds), leaving its pid first.
SLOW_AGENT = r"""
import os, sys, time
from pathlib import Path

here = Path(__file__).resolve().parent
sys.stdin.read()
(here / "agent.pid.tmp").write_text(str(os.getpid()))
os.replace(here / "agent.pid.tmp", here / "agent.pid")
time.sleep(float((here / "slow").read_text()))
print("thought it through")
"""


def _start(room: Room, tmp: Path, **extra: str) -> FleetProcess:
    script = tmp / "agent.py"
    script.write_text(SLOW_AGENT)
    env = write_fleet_env(
        tmp / "fleet.env",
        room.emu,
        [room.apps["dana"]],
        room.db,
        SLACK_A2A_ROOMS=room.channel,
        SLACK_OWNER=room.human.id,
        NANOSLACK_AGENT_COMMAND=f"exec {shlex.quote(sys.executable)} {shlex.quote(str(script))}",
        LOG_FORMAT="json",
        **extra,
    )
    return FleetProcess.start(env)


def _replies(room: Room) -> list[dict[str, Any]]:
    dana = room.apps["dana"].bot_user_id
    return [m for m in room.emu.all_messages(room.channel) if m.get("user") == dana]


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def _turn_under_way(room: Room, fleet: FleetProcess, tmp: Path) -> int:
    await fleet.wait_for_event("fleet started")
    await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} think about it")
    await fleet.wait_for_event("turn started")
    pid_file = tmp / "agent.pid"
    await room.emu.wait_for(pid_file.exists, timeout=15, message="the agent never started")
    return int(pid_file.read_text())


async def test_sigterm_during_a_slow_turn_lets_it_post_before_the_process_exits(
    room: Room, tmp_path: Path
) -> None:
    (tmp_path / "slow").write_text("3")  # longer than the 2 s a stop used to give a turn
    fleet = _start(room, tmp_path)
    await _turn_under_way(room, fleet, tmp_path)

    fleet.send_signal(signal.SIGTERM)
    assert await fleet.wait(within=30) == 0

    assert [m["text"] for m in _replies(room)] == ["thought it through"]
    [stopped] = fleet.events("fleet stopped")
    assert (stopped["turns_finished"], stopped["turns_left"], stopped["hurried"]) == (1, 0, False)
    assert room.sql("SELECT status FROM turns") == [("done",)]
    assert room.sql("SELECT count(*) FROM instance_leases") == [(0,)]  # released for a standby


async def test_a_second_sigterm_stops_at_once_and_the_turn_runs_again_at_the_next_start(
    room: Room, tmp_path: Path
) -> None:
    (tmp_path / "slow").write_text("600")
    fleet = _start(room, tmp_path, NANOSLACK_SHUTDOWN_GRACE="600")
    pid = await _turn_under_way(room, fleet, tmp_path)

    fleet.send_signal(signal.SIGTERM)
    await fleet.wait_for_event("fleet stopping")
    fleet.send_signal(signal.SIGTERM)
    # Far inside the 600 s grace: the second signal does not wait for the turn.
    assert await fleet.wait(within=20) == 0

    [stopped] = fleet.events("fleet stopped")
    assert (stopped["turns_finished"], stopped["turns_left"], stopped["hurried"]) == (0, 1, True)
    assert not _running(pid), "the agent of the cancelled turn is still running"
    assert _replies(room) == []
    assert room.sql("SELECT status FROM turns") == [("running",)]
    assert room.sql("SELECT status FROM messages WHERE instance = 'dana'") == [("pending",)]

    (tmp_path / "slow").write_text("0")
    again = _start(room, tmp_path)
    try:
        await room.emu.wait_for(lambda: _replies(room), timeout=20, message="the turn never ran again")
    finally:
        assert await again.stop() == 0
    assert [m["text"] for m in _replies(room)] == ["thought it through"]
    assert room.sql("SELECT status FROM turns ORDER BY id") == [("abandoned",), ("done",)]
