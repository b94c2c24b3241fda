"""Routines in the core against a real store (docs/routines.md): each due time claimed once,
a run a crash left ``running`` failed at the next start, who may stop a routine, and what
a run is shown of its owners' notes."""

from __future__ import annotations

import asyncio
from pathlib import Path

from nanoslack.agents import Turn, load_teammate
from nanoslack.agents.tool import call_tool
from nanoslack.halts import Halts
from nanoslack.inbound import Identity
from nanoslack.routines.clock import QueuedRun, RoutineClock, RunQueue
from nanoslack.routines.runner import RoutineRun, RoutineTurns
from nanoslack.routines.spec import OWNER as TO_OWNERS
from nanoslack.routines.spec import Every, Routine, RoutineFile
from nanoslack.routines.tools import STOP_ROUTINE, RoutineToolset
from nanoslack.store import MessageRow, Store
from nanoslack.store.routines import RUNNING
from nanoslack.tools import TurnEffects
from nanoslack.turns.transcript import Transcripts
from tests.core.core_helpers import BOT_USER, INSTANCE, OWNER, ROOM

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
    msg = MessageRow(
        instance=INSTANCE,
        channel=ROOM,
        ts="2.0",
        thread_key="1.0",
        messaging_group_id=None,
        sender_id=sender,
        text="stop plan",
        status="pending",
        hop=0,
        hop_limit=0,
        handoff_depth=0,
        created_at=0.0,
    )
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
