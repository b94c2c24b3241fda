"""A simulated day of routines (docs/routines.md): 50 routines across 10 instances run two
hours of a clock the routine clocks read (300 × real time), against the emulator, with the
real fleet and store. Every due time has exactly one row, no routine's runs overlap, and a
person's mention at the busiest moment is answered before any routine turn waiting then."""

from __future__ import annotations

import math
import time
from pathlib import Path

from nanoslack.config import load_settings
from nanoslack.emulator import Emulator
from nanoslack.services import TurnOptions
from nanoslack.slack.fleet import Fleet
from nanoslack.testing.fleet_env import sql, write_fleet_env
from tests.e2e.conftest import FAST_SOCKET
from tests.e2e.helpers import SimClock

SPEED = 300.0  # simulated seconds per real second
DAY_S = 2 * 3600.0
EVERY = ("5m", "10m", "15m", "20m", "30m")  # all five are due together every 30 minutes
INSTANCES = [f"bot{i}" for i in range(10)]


async def test_a_simulated_day_of_50_routines_runs_each_due_time_once_never_overlapping_or_ahead_of_people(
    emu: Emulator, tmp_path: Path
) -> None:
    alice = emu.add_user("alice")
    apps = [emu.add_app(n) for n in INSTANCES]
    room = emu.create_conversation([alice.id, *(a.bot_user_id for a in apps)]).id
    for app in apps:
        folder = tmp_path / "teammates" / app.name
        folder.mkdir(parents=True)
        body = "".join(
            f'[[routine]]\nname = "r{every}"\nevery = "{every}"\nchannel = "{room}"\n'
            f'prompt = "Check {every}."\n\n'
            for every in EVERY
        )
        (folder / "routines.toml").write_text(body)
    db = tmp_path / "data" / "nanoslack.db"
    env_file = write_fleet_env(
        tmp_path / ".env",
        emu,
        apps,
        db,
        SLACK_A2A_ROOMS=room,
        SLACK_OWNER=alice.id,
        NANOSLACK_TEAMMATES=str(tmp_path / "teammates"),
    )
    # The day starts a minute past a half hour: its busiest moments are on the half hours.
    start = math.ceil(time.time() / 1800) * 1800 + 60.0
    clock = SimClock(start, SPEED)
    fleet = Fleet(
        load_settings(env_file, environ={}),
        socket=FAST_SOCKET,
        turns=TurnOptions(clock_tick=0.02, clock_time=clock),
    )
    await fleet.start()
    try:
        await emu.wait_for(lambda: sql(db, "SELECT count(*) FROM routines") == [(50,)], timeout=30)
        clock.go()
        busiest = start - 60.0 + 1800.0
        await clock.until(busiest)
        mention = await emu.post_as_user(alice.id, room, f"<@{apps[0].bot_user_id}> status, please?")
        await clock.until(start + DAY_S)
        end = clock()
        await emu.wait_for(
            lambda: sql(db, "SELECT count(*) FROM routine_runs WHERE status = 'running'") == [(0,)],
            timeout=30,
        )
    finally:
        await fleet.stop()

    rows = sql(
        db, "SELECT instance, routine, due_at, status FROM routine_runs ORDER BY instance, routine, due_at"
    )
    by_routine: dict[tuple[str, str], list[float]] = {}
    for instance, routine, due, _ in rows:
        by_routine.setdefault((instance, routine), []).append(float(due))
    assert len(by_routine) == 50
    for (instance, routine), dues in by_routine.items():
        step = {"5m": 300, "10m": 600, "15m": 900, "20m": 1200, "30m": 1800}[routine[1:]]
        expected = [float(t) for t in range(math.ceil(start / step) * step, int(end) + 1, step)]
        # Every due time of the day has exactly one row (the last one may fall after the stop).
        assert dues[: len(expected) - 1] == expected[:-1], (instance, routine)
    assert {r[3] for r in rows} <= {"done", "silent", "skipped", "missed"}

    spans = sql(
        db,
        "SELECT r.instance, r.routine, t.started_at, t.finished_at FROM routine_runs r"
        " JOIN turns t ON t.id = r.turn_id ORDER BY r.instance, r.routine, t.started_at",
    )
    last: dict[tuple[str, str], float] = {}
    for instance, routine, started, finished in spans:
        assert started >= last.get((instance, routine), 0.0), "two runs of one routine overlapped"
        last[(instance, routine)] = finished
    # No instance ran two routine turns at once.
    per_instance: dict[str, list[tuple[float, float]]] = {}
    for instance, _, started, finished in spans:
        per_instance.setdefault(instance, []).append((started, finished))
    for turns in per_instance.values():
        turns.sort()
        assert all(b[0] >= a[1] for a, b in zip(turns, turns[1:], strict=False))

    [(human_started, pending_at)] = sql(
        db,
        "SELECT t.started_at, m.created_at FROM turns t JOIN messages m ON m.instance = t.instance"
        " AND m.ts = t.through_ts WHERE t.instance = 'bot0' AND m.ts = ?",
        mention,
    )
    later = [s for i, _, s, _ in spans if i == "bot0" and s > pending_at]
    assert later and all(s >= human_started for s in later), "a routine turn went ahead of the mention"
