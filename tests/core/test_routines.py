"""Routines in the core against a real store (docs/routines.md): each due time claimed once,
a run a crash left ``running`` failed at the next start, who may stop a routine, and what
a run is shown of its owners' notes."""

from __future__ import annotations

import argparse
import asyncio
import io
import sqlite3
from pathlib import Path

from structlog.testing import capture_logs

from nanoslack.agents import Turn, TurnOrigin, load_teammate
from nanoslack.agents.tool import call_tool
from nanoslack.config.memory import MemorySettings
from nanoslack.halts import Halts
from nanoslack.inbound import Identity
from nanoslack.ops import routines as routines_cli
from nanoslack.routines.clock import QueuedRun, RoutineClock, RunQueue
from nanoslack.routines.feature import RoutinesFeature
from nanoslack.routines.runner import RoutineRun, RoutineTurns
from nanoslack.routines.spec import OWNER as TO_OWNERS
from nanoslack.routines.spec import Every, Routine, RoutineFile
from nanoslack.routines.tools import CANCEL_ROUTINE, SCHEDULE_ROUTINE, STOP_ROUTINE, RoutineToolset
from nanoslack.store import MessageRow, Store, sqlite_url
from nanoslack.store.routines import RUNNING
from nanoslack.tools import TurnEffects
from nanoslack.tools.memory import Notes
from nanoslack.turns.transcript import Transcripts
from tests.core.core_helpers import BOT_USER, DM, INSTANCE, OWNER, ROOM
from tests.tools.mcp_helpers import until

DAY = Every(86_400, "1d")
DUE = DAY.next_after(1_800_000_000.0)  # a due time on the 1d grid


def _routine(channel: str = ROOM) -> Routine:
    return Routine(INSTANCE, "plan", DAY, channel, "Post the plan.")


class _Directory:
    async def member_names(self, channel: str) -> tuple[str, ...]:
        return ("alice", "dana")

    def name_of_user(self, slack_user_id: str) -> str | None:
        return {OWNER: "alice", BOT_USER: "dana"}.get(slack_user_id)


# -- each due time once ------------------------------------------------------------------------


def test_a_due_time_two_processes_claim_is_run_by_one(store: Store, store_url: str) -> None:
    other = Store.open(store_url)  # a second process on the same store
    try:
        first = store.routines.claim(INSTANCE, "plan", DUE, RUNNING)
        second = other.routines.claim(INSTANCE, "plan", DUE, RUNNING)
    finally:
        other.close()
    assert first is not None and second is None
    assert [(r.due_at, r.status) for r in store.routines.history(INSTANCE, "plan")] == [(DUE, RUNNING)]


async def test_a_run_a_crash_left_running_is_failed_interrupted_and_the_next_due_time_runs(
    store: Store, tmp_path: Path
) -> None:
    store.routines.claim(INSTANCE, "plan", DUE, RUNNING)  # the process died during this run

    async def load() -> RoutineFile:
        return RoutineFile(tmp_path / "routines.toml", (_routine(),))

    queue = RunQueue()
    clock = RoutineClock(
        store, INSTANCE, path=tmp_path / "routines.toml", load=load, queue=queue, halts=Halts(store)
    )
    await clock.tick(DUE + DAY.seconds + 1)  # the next start, at the next due time
    runs = [(r.due_at, r.status, r.reason) for r in store.routines.history(INSTANCE, "plan")]
    assert runs == [(DUE + DAY.seconds, RUNNING, ""), (DUE, "failed", "interrupted")]
    assert len(queue) == 1  # its turn is on its way, not skipped (still running)


# -- stop_routine ------------------------------------------------------------------------------


def _stop_routine_for(store: Store, sender: str) -> tuple[bool, str]:
    """Whether a turn ``sender`` woke is offered ``stop_routine``, and what calling it says."""
    msg = _msg(sender)
    build = RoutineToolset.factory(store, INSTANCE, (OWNER,))
    turn = Turn(INSTANCE, "dana", ROOM, "1.0", sender, False, "Group chat", (), ())
    tools = build(1, turn, [msg], TurnEffects())
    (tool,) = (t for t in tools if t.name == STOP_ROUTINE)
    result = asyncio.run(call_tool(tools, STOP_ROUTINE, {"name": "plan"}))
    return tool.offered, result.text


def test_stop_routine_is_offered_only_in_a_turn_an_owner_woke(store: Store) -> None:
    store.routines.define(INSTANCE, [("plan", DAY.describe(), ROOM, DUE)])
    for stranger in ("slack:U0BOB", "slack:bot:B0ELI"):
        offered, text = _stop_routine_for(store, stranger)
        assert not offered and text == "not stopped: only your owners can ask you to stop a routine"
        assert not store.routines.states(INSTANCE)["plan"].paused
    offered, text = _stop_routine_for(store, f"slack:{OWNER}")
    assert offered and text.startswith("routine plan paused")
    assert store.routines.states(INSTANCE)["plan"].paused


# -- what a run is shown ---------------------------------------------------------------------


async def test_a_room_routine_is_not_shown_its_owners_private_notes_and_an_owner_routine_is(
    store: Store, tmp_path: Path
) -> None:
    store.memories.add(instance=INSTANCE, scope="self", text="ship on Tuesdays", asked_by="operator")
    store.memories.add(instance=INSTANCE, scope="private", text="the vault code is 1234", asked_by="operator")
    transcripts = Transcripts(
        identity=Identity(INSTANCE, "T0TEAM", BOT_USER, "B0DANA", "dana"),
        store=store,
        teammate=load_teammate(tmp_path / "teammates", INSTANCE),
        skills_dir=tmp_path / "teammates" / "_skills",
        directory=_Directory(),
        owners=(OWNER,),
    )

    async def shown(channel: str) -> str:
        run = RoutineRun(RoutineTurns(store, INSTANCE, RunQueue()), QueuedRun(1, _routine(channel), 0.0))
        turn, _ = await transcripts.build_sourced(run.origin, run.room, run.run.routine.prompt)
        return "\n".join(turn.memory)

    in_room = await shown(ROOM)
    assert "ship on Tuesdays" in in_room and "vault code" not in in_room
    assert "the vault code is 1234" in await shown(TO_OWNERS)


# -- routines an agent sets ------------------------------------------------------------------

NOW = 1_800_000_000.0  # on the 5m grid
FIVE = 300.0
STRANGER = "slack:U0BOB"
BOT = "slack:bot:B0ELI"


class _Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def _feature(
    store: Store, teammates: Path, clock: _Clock, *, members: frozenset[str] = frozenset({ROOM})
) -> RoutinesFeature:
    """dana's routines as the core builds them: the memory's write rule, Slack's membership."""
    notes = Notes(INSTANCE, store, MemorySettings(), (OWNER,))

    async def is_member(channel: str, _bot_user: str) -> bool | None:
        return channel in members

    return RoutinesFeature(
        store,
        Identity(INSTANCE, "T0TEAM", BOT_USER, "B0DANA", "dana"),
        teammates_dir=teammates,
        owners=(OWNER,),
        halts=Halts(store),
        wake=lambda: None,
        is_member=is_member,
        clock=clock,
        may_write_self=lambda turn, msgs: notes.context(turn, msgs).trusted,
    )


def _msg(sender: str, channel: str = ROOM, thread: str = "1.0") -> MessageRow:
    return MessageRow(
        instance=INSTANCE,
        channel=channel,
        ts="2.0",
        thread_key=thread,
        messaging_group_id=None,
        sender_id=sender,
        text="check the build every morning",
        status="pending",
        hop=0,
        hop_limit=0,
        handoff_depth=0,
        created_at=0.0,
    )


async def _call(
    feature: RoutinesFeature, sender: str, tool: str, where: str = ROOM, **args: str
) -> tuple[bool, str]:
    """Whether a turn ``sender`` woke in ``where`` is offered ``tool``, and what a call says."""
    thread = "" if where.startswith("D") else "1.0"
    turn = Turn(INSTANCE, "dana", where, thread, sender, False, "Group chat", (), ())
    (family,) = feature.toolsets()
    tools = family(1, turn, [_msg(sender, where, thread)], TurnEffects())
    (found,) = (t for t in tools if t.name == tool)
    result = await call_tool(tools, tool, args)
    return found.offered, result.text


async def _schedule(feature: RoutinesFeature, name: str, sender: str = f"slack:{OWNER}", **args: str) -> str:
    args.setdefault("prompt", "Check the build.")
    if "cron" not in args:
        args.setdefault("every", "5m")
    return (await _call(feature, sender, SCHEDULE_ROUTINE, name=name, **args))[1]


def _agents(store: Store) -> dict[str, tuple[str, str, str]]:
    return {
        r.name: (r.schedule, r.channel, r.prompt)
        for r in store.routines.rows(INSTANCE)
        if r.source == "agent"
    }


async def test_schedule_routine_in_an_owners_turn_keeps_it_and_a_bots_or_a_strangers_turn_is_refused(
    store: Store, tmp_path: Path
) -> None:
    feature = _feature(store, tmp_path, _Clock())
    for sender in (STRANGER, BOT):
        with capture_logs() as logs:
            offered, said = await _call(
                feature, sender, SCHEDULE_ROUTINE, name="build", every="1h", prompt="x"
            )
        assert offered and said.startswith("not scheduled: only your owners can ask you to set up")
        assert [e["reason"] for e in logs if e["event"] == "routine refused"] == [
            said.removeprefix("not scheduled: ")
        ]
        offered, said = await _call(feature, sender, CANCEL_ROUTINE, name="build")
        assert offered and said.startswith("not cancelled: only your owners")
    # A turn no message woke and no routine started (a teammate's ask) is refused too.
    asked = Turn(INSTANCE, "dana", ROOM, "1.0", BOT, False, "Group chat", (), ())
    (family,) = feature.toolsets()
    args = {"name": "build", "every": "1h", "prompt": "x"}
    said = (await call_tool(family(1, asked, [], TurnEffects()), SCHEDULE_ROUTINE, args)).text
    assert said.startswith("not scheduled: only your owners")
    assert _agents(store) == {}
    owner = f"slack:{OWNER}"
    offered, said = await _call(
        feature, owner, SCHEDULE_ROUTINE, name="build", every="1h", prompt="Check it."
    )
    assert offered and said.startswith("routine build created: every 1h, posting in C0ROOM")
    assert _agents(store) == {"build": ("every 1h", ROOM, "Check it.")}
    # In a DM with its owner the routine posts in that DM; the same name again changes it.
    _, said = await _call(feature, owner, SCHEDULE_ROUTINE, DM, name="build", every="2h", prompt="Again.")
    assert said.startswith("routine build updated: every 2h, posting in D0DM")
    assert _agents(store) == {"build": ("every 2h", DM, "Again.")}
    # The instance's own routine may set one (its owner set the routine up), posting where it posts.
    run = Turn(INSTANCE, "dana", "", "", "fleet", False, "DM", (), (), origin=TurnOrigin("routine", "plan"))
    said = (await call_tool(family(1, run, [], TurnEffects()), SCHEDULE_ROUTINE, args)).text
    assert said.startswith("routine build updated: every 1h, posting in your owners' DMs")


async def test_schedule_routine_refuses_under_5_minutes_a_bad_cron_a_channel_it_is_not_in_and_an_11th(
    store: Store, tmp_path: Path
) -> None:
    feature = _feature(store, tmp_path, _Clock())
    assert "more often than a routine you set may run (at most once every 5 minutes)" in await _schedule(
        feature, "fast", every="4m"
    )
    assert "more often than a routine you set may run (at most once every 5 minutes)" in await _schedule(
        feature, "fast", cron="* * * * *"
    )
    assert "more often than a routine you set may run (at most once every 5 minutes)" in await _schedule(
        feature, "fast", cron="0,1 9 * * *"
    )
    assert (await _schedule(feature, "fast", cron="0 9 * *")).startswith(
        "not scheduled: cron '0 9 * *' needs five fields"
    )
    assert (await _schedule(feature, "fast", cron="0 9 31 2 *")).startswith(
        "not scheduled: cron '0 9 31 2 *' never fires"
    )
    assert (
        await _schedule(feature, "both", every="1h", cron="0 9 * * *")
        == "not scheduled: give one of every or cron"
    )
    assert (await _schedule(feature, "Bad Name")).startswith("not scheduled: name it with lowercase")
    assert "you are not a member of C0OTHER" in await _schedule(feature, "away", channel="C0OTHER")
    assert _agents(store) == {}
    assert (await _schedule(feature, "weekday", cron="0 9 * * 1-5")).startswith(
        "routine weekday created: cron 0 9 * * 1-5"
    )
    for i in range(9):
        assert "created" in await _schedule(feature, f"r{i}")
    with capture_logs() as logs:
        said = await _schedule(feature, "eleventh")
    assert (
        said.startswith("not scheduled: you have 10 routines already (r0, r1,") and "cancel one first" in said
    )
    assert [e["routine"] for e in logs if e["event"] == "routine refused"] == ["eleventh"]
    assert "updated" in await _schedule(feature, "r0", every="1h")  # changing one of the ten is no eleventh
    assert len(_agents(store)) == 10


def _file(tmp_path: Path, body: str) -> None:
    folder = tmp_path / INSTANCE
    folder.mkdir(exist_ok=True)
    (folder / "routines.toml").write_text(body)


def _due(feature: RoutinesFeature) -> list[tuple[str, str]]:
    """The runs the clock queued since the last look, as (name, prompt), each ended done."""
    taken = []
    while (run := feature.turns.take()) is not None:
        taken.append((run.run.routine.name, run.run.routine.prompt))
        run.ended("done")
    return taken


async def _with_file_plan(store: Store, tmp_path: Path) -> tuple[_Clock, RoutinesFeature]:
    """dana's routines with a file holding ``plan``, read by the clock."""
    clock = _Clock()
    feature = _feature(store, tmp_path, clock)
    _file(tmp_path, f'[[routine]]\nname = "plan"\nevery = "1d"\nchannel = "{ROOM}"\nprompt = "File plan."\n')
    await feature.clock.tick(clock.now)
    return clock, feature


async def test_the_file_wins_a_name_clash_when_set_and_when_the_file_gains_the_name_later(
    store: Store, tmp_path: Path
) -> None:
    clock, feature = await _with_file_plan(store, tmp_path)
    said = await _schedule(feature, "plan")
    assert said == (
        "not scheduled: your operator's routines file has a routine named plan; it wins: choose another name"
    )
    assert "created" in await _schedule(feature, "check", prompt="Agent check.")
    for step in (1, 2):
        clock.now = NOW + step * FIVE
        await feature.clock.tick(clock.now)
        assert _due(feature) == [("check", "Agent check.")]
    # The operator's file gains the agent's name: the file's runs, the agent's is shadowed.
    _file(
        tmp_path,
        f'[[routine]]\nname = "check"\nevery = "10m"\nchannel = "{ROOM}"\nprompt = "File check."\n',
    )
    clock.now = NOW + 4 * FIVE
    await feature.clock.tick(clock.now)
    assert _due(feature) == [("check", "File check.")]
    out = io.StringIO()
    assert routines_cli._list(store, argparse.Namespace(env_file=tmp_path / ".env"), {}, out) == 0
    listed = [line.split()[1:4] for line in out.getvalue().splitlines()[1:]]
    assert listed == [["check", "file", "every"], ["check", "agent", "(shadowed"]]
    assert "agent (shadowed by the file)" in out.getvalue()
    # A process that takes the instance over now (a fresh clock) runs the file's, on the
    # file's times: 5F is no 10-minute time, so nothing runs then.
    later = _feature(store, tmp_path, clock)
    for step, ran in ((5, []), (6, [("check", "File check.")])):
        clock.now = NOW + step * FIVE
        await later.clock.tick(clock.now)
        assert _due(later) == ran, step
    # The file drops the name: the agent's routine runs again.
    _file(tmp_path, "")
    clock.now = NOW + 7 * FIVE
    await later.clock.tick(clock.now)
    clock.now = NOW + 8 * FIVE
    await later.clock.tick(clock.now)
    assert _due(later) == [("check", "Agent check.")]


async def test_cancel_routine_removes_the_agents_routine_and_cannot_remove_the_files(
    store: Store, tmp_path: Path
) -> None:
    clock, feature = await _with_file_plan(store, tmp_path)
    assert "created" in await _schedule(feature, "check")
    clock.now = NOW + FIVE
    await feature.clock.tick(clock.now)
    assert _due(feature) == [("check", "Check the build.")]
    owner = f"slack:{OWNER}"
    said = (await _call(feature, owner, CANCEL_ROUTINE, name="plan"))[1]
    assert said.startswith("not cancelled: plan is in your operator's routines file: only they can remove it")
    assert (await _call(feature, owner, CANCEL_ROUTINE, name="check"))[
        1
    ] == "routine check cancelled: it runs no more"
    assert _agents(store) == {} and "plan" in store.routines.states(INSTANCE)
    said = (await _call(feature, owner, CANCEL_ROUTINE, name="check"))[1]
    assert said == "not cancelled: you have no routine named 'check'; yours are: none"
    for step in (2, 3):
        clock.now = NOW + step * FIVE
        await feature.clock.tick(clock.now)
    assert _due(feature) == []
    assert [r.status for r in store.routines.history(INSTANCE, "check")] == ["done"]  # its history stays


async def test_an_agent_routine_set_in_one_process_runs_each_due_time_once_across_two(
    store: Store, store_url: str, tmp_path: Path
) -> None:
    """Two processes on one store (PostgreSQL: two hosts) tick the same times: the routine
    one process's turn set is seen by the other, and each due time is claimed once."""
    other = Store.open(store_url)
    try:
        clock = _Clock()
        here, there = _feature(store, tmp_path, clock), _feature(other, tmp_path, clock)
        for feature in (here, there):  # both run before the routine is set
            await feature.clock.tick(clock.now)
        assert "created" in await _schedule(here, "check")
        ran: list[tuple[str, float]] = []
        for step in range(1, 7):
            clock.now = NOW + step * FIVE
            for name, feature in (
                (("here", here), ("there", there)) if step % 2 else (("there", there), ("here", here))
            ):
                await feature.clock.tick(clock.now)
                ran += [(name, run.run.due_at) for run in _drain(feature)]
        assert sorted(due for _, due in ran) == [NOW + s * FIVE for s in range(1, 7)]
        assert {name for name, _ in ran} == {"here", "there"}  # the other process saw the routine
        dues = [r.due_at for r in store.routines.history(INSTANCE, "check")]
        assert sorted(dues) == [NOW + s * FIVE for s in range(1, 7)]
    finally:
        other.close()


def _drain(feature: RoutinesFeature) -> list[RoutineRun]:
    runs = []
    while (run := feature.turns.take()) is not None:
        run.ended("done")
        runs.append(run)
    return runs


async def test_a_store_the_routine_clock_cannot_read_is_logged_once_and_its_recovery_once(
    tmp_path: Path,
) -> None:
    """The clock reads the store every tick (the agent's routines): a store it cannot read
    for many ticks is one warning, not one a tick."""
    db = tmp_path / "nanoslack.db"
    store = Store.open(sqlite_url(str(db)))
    ticks = 0

    def now() -> float:
        nonlocal ticks
        ticks += 1
        return NOW

    async def load() -> RoutineFile:
        return RoutineFile(tmp_path / "routines.toml")

    clock = RoutineClock(
        store,
        INSTANCE,
        path=tmp_path / "routines.toml",
        load=load,
        queue=RunQueue(),
        halts=Halts(store),
        tick=0.005,
        clock=now,
    )
    operator = sqlite3.connect(db)
    try:
        with capture_logs() as logs:
            task = asyncio.create_task(clock.run())
            operator.execute("ALTER TABLE routines RENAME TO routines_away")
            operator.commit()
            seen = ticks
            await until(lambda: ticks >= seen + 20, within=10)
            operator.execute("ALTER TABLE routines_away RENAME TO routines")
            operator.commit()
            await until(lambda: any(e["event"] == "routine clock recovered" for e in logs), within=10)
            task.cancel()
    finally:
        operator.close()
        store.close()
    failed = [e for e in logs if e["event"] == "routine clock failed"]
    assert len(failed) == 1 and "routines" in failed[0]["error"]
