"""Routines through the emulator (docs/routines.md): the real fleet, a real store, real
gate processes and a real ``command`` agent; each due time is one ``routine_runs`` row."""

from __future__ import annotations

import asyncio
import io
import json
import signal
import time
from pathlib import Path
from typing import Any

import psycopg

from nanoslack.emulator import Emulator
from nanoslack.fleetproc import FleetProcess
from nanoslack.ops import admin
from nanoslack.ops import routines as routines_cli
from nanoslack.store import Store, sqlite_url
from nanoslack.testing.fleet_env import scalar, sql, write_fleet_env
from nanoslack.testing.llm_server import LLMServer, backend_env, openai_answer, openai_text, send
from tests.e2e.conftest import FleetFactory, Room
from tests.e2e.turn_agent import TurnAgent


def write_routines(room: Room, instance: str, body: str) -> Path:
    folder = room.tmp / "teammates" / instance
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "routines.toml"
    path.write_text(body)
    return path


def gate_script(room: Room, instance: str, name: str, body: str) -> str:
    path = room.tmp / "teammates" / instance / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return f"./{name}"


def runs(room: Room, routine: str, instance: str = "dana") -> list[tuple[Any, ...]]:
    return room.sql(
        "SELECT due_at, status, reason, turn_id FROM routine_runs WHERE instance = ? AND routine = ?"
        " ORDER BY due_at",
        instance,
        routine,
    )


def top_level_posts(room: Room, bot_user: str) -> list[dict[str, Any]]:
    return [
        m
        for m in room.emu.conversation_messages(room.channel)
        if m.get("user") == bot_user and m.get("thread_ts") in (None, m["ts"])
    ]


def replies(room: Room, root: str) -> list[dict[str, Any]]:
    for m in room.emu.conversation_messages(room.channel):
        if m["ts"] == root:
            return list(m.get("replies") or [])
    return []


def cli(*argv: str, db: Path) -> str:
    out = io.StringIO()
    # The fleet's .env (beside data/) names the instances a command may be given.
    env = ["--env-file", str(db.parent.parent / ".env")]
    assert routines_cli.main(["--db", str(db), *env, *argv], out=out) == 0
    return out.getvalue()


def fleet_keys(room: Room, program: TurnAgent, **extra: str) -> dict[str, str]:
    return {
        "SLACK_OWNER": room.human.id,
        "NANOSLACK_TEAMMATES": str(room.tmp / "teammates"),
        **program.env(),
        **extra,
    }


async def test_a_routine_every_2s_posts_top_level_in_its_room_and_routines_shows_its_last_status(
    room: Room, fleet_factory: FleetFactory
) -> None:
    program = TurnAgent.install(room.tmp)
    program.reply("dana", "Plan #{turn}: ship it")
    write_routines(
        room,
        "dana",
        f'[[routine]]\nname = "plan"\nevery = "2s"\nchannel = "{room.channel}"\nprompt = "Post the plan."\n',
    )
    await fleet_factory(["dana"], **fleet_keys(room, program))
    dana = room.apps["dana"].bot_user_id
    await room.emu.wait_for(lambda: len(top_level_posts(room, dana)) >= 2, timeout=20)
    prompt = program.calls("dana")[0]["stdin"]
    assert prompt.startswith('[Routine "plan"]') and "Post the plan." in prompt
    # The routine's runs are a conversation of their own: the second run sees the first.
    earlier, _, new = program.calls("dana")[1]["stdin"].partition("--- new since your last turn ---")
    assert "Post the plan." in earlier and "dana: Plan #1: ship it" in earlier and "Post the plan." in new
    await room.emu.wait_for(lambda: any(r[1] == "done" for r in runs(room, "plan")), timeout=10)
    listing = cli(db=room.db)
    assert "plan" in listing and "every 2s" in listing and "done" in listing, listing

    # A reply to the routine's post is an ordinary engaged thread: answered without a mention.
    root = top_level_posts(room, dana)[0]["ts"]
    program.reply("dana", "answer in thread")
    await room.emu.post_as_user(room.human.id, room.channel, "what about the tests?", thread_ts=root)
    await room.emu.wait_for(lambda: any(r.get("user") == dana for r in replies(room, root)), timeout=20)
    thread_prompts = [c["stdin"] for c in program.calls("dana") if "what about the tests?" in c["stdin"]]
    assert thread_prompts and "Plan #" in thread_prompts[0]  # the thread's turn sees the routine's post
    assert json.dumps(runs(room, "plan"))  # rows are plain values


def routine_toml(channel: str, name: str = "plan", every: str = "2s", **fields: str | int) -> str:
    lines = [
        "[[routine]]",
        f'name = "{name}"',
        f'every = "{every}"',
        f'channel = "{channel}"',
        'prompt = "Post the plan."',
    ]
    lines += [f"{k} = {json.dumps(v)}" for k, v in fields.items()]
    return "\n".join(lines) + "\n"


def llm_keys(room: Room, llm: LLMServer, **extra: str) -> dict[str, str]:
    return {
        "SLACK_OWNER": room.human.id,
        "NANOSLACK_TEAMMATES": str(room.tmp / "teammates"),
        **backend_env("openai", llm, "sk-test-routines"),
        **extra,
    }


def statuses(room: Room, routine: str = "plan") -> list[tuple[str, str]]:
    return [(str(r[1]), str(r[2])) for r in runs(room, routine)]


async def test_a_run_slower_than_its_interval_never_overlaps_and_records_skipped_still_running(
    room: Room, fleet_factory: FleetFactory
) -> None:
    program = TurnAgent.install(room.tmp)
    program.hold("dana")  # the first run takes longer than several intervals
    write_routines(room, "dana", routine_toml(room.channel, every="1s"))
    await fleet_factory(["dana"], **fleet_keys(room, program))
    await room.emu.wait_for(
        lambda: sum(s == ("skipped", "still running") for s in statuses(room)) >= 2, timeout=20
    )
    assert len(program.calls("dana")) == 1
    program.release("dana")
    await room.emu.wait_for(lambda: len(program.calls("dana")) >= 2, timeout=20)
    await room.emu.wait_for(
        lambda: ("done", "") in statuses(room) or ("silent", "") in statuses(room), timeout=10
    )
    spans = room.sql(
        "SELECT started_at, finished_at FROM turns WHERE thread_key = 'routine:plan' ORDER BY id"
    )
    finished = [s for s in spans if s[1] is not None]
    for (_, end), (start, _) in zip(finished, finished[1:], strict=False):
        assert start >= end, "two runs of one routine overlapped"


async def test_a_gate_exiting_1_makes_no_model_request_and_records_skipped_gate(
    room: Room, fleet_factory: FleetFactory
) -> None:
    gate = gate_script(room, "dana", "nothing-to-do.sh", "exit 1")
    write_routines(room, "dana", routine_toml(room.channel, gate=gate))
    async with LLMServer() as llm:
        llm.openai.default = openai_text()
        await fleet_factory(["dana"], **llm_keys(room, llm))
        await room.emu.wait_for(lambda: statuses(room).count(("skipped", "gate")) >= 2, timeout=20)
        assert llm.openai.requests == []
    assert room.sql("SELECT count(*) FROM turns") == [(0,)]


async def test_a_gates_stdout_reaches_the_models_prompt(room: Room, fleet_factory: FleetFactory) -> None:
    gate = gate_script(room, "dana", "inbox.sh", 'echo "3 new tickets: T-17, T-18, T-19"; exit 0')
    write_routines(room, "dana", routine_toml(room.channel, gate=gate))
    async with LLMServer() as llm:
        llm.openai.default = openai_text()
        await fleet_factory(["dana"], **llm_keys(room, llm))
        await room.emu.wait_for(lambda: llm.openai.requests, timeout=20)
        body = json.dumps(llm.openai.requests[0].json)
    assert "3 new tickets: T-17, T-18, T-19" in body and '[Routine \\"plan\\"]' in body


async def test_a_spent_daily_tokens_skips_with_budget_and_sends_one_owner_dm(
    room: Room, fleet_factory: FleetFactory
) -> None:
    write_routines(room, "dana", routine_toml(room.channel, every="1s", daily_tokens=10))
    async with LLMServer() as llm:
        llm.openai.default = openai_answer(send("plan: ship it"), tokens=(40, 2))
        llm.openai.push(openai_answer(send("plan: ship it"), tokens=(40, 2)), openai_text(tokens=(3, 1)))
        await fleet_factory(["dana"], **llm_keys(room, llm))
        await room.emu.wait_for(lambda: statuses(room).count(("skipped", "budget")) >= 3, timeout=30)
        calls = len(llm.openai.requests)
    # The first run's first call spent the day's 10 tokens: it stopped there (its post kept),
    # and every later due time was skipped without a model call.
    assert calls == 1
    assert statuses(room)[0] == ("done", "budget")
    dms = [
        m
        for conv in room.emu.conversations()
        if conv.kind == "im" and room.human.id in conv.members
        for m in room.emu.conversation_messages(conv.id)
        if "stopped for today" in str(m.get("text"))
    ]
    assert len(dms) == 1, dms


async def test_pause_stops_new_runs_and_resume_restarts_them(room: Room, fleet_factory: FleetFactory) -> None:
    program = TurnAgent.install(room.tmp)
    write_routines(room, "dana", routine_toml(room.channel, every="1s"))
    await fleet_factory(["dana"], **fleet_keys(room, program))
    await room.emu.wait_for(lambda: program.calls("dana"), timeout=20)
    assert "paused" in cli("pause", "dana", "plan", db=room.db)
    await room.emu.wait_for(lambda: statuses(room).count(("skipped", "paused")) >= 2, timeout=20)
    calls = len(program.calls("dana"))
    await room.emu.wait_for(lambda: statuses(room).count(("skipped", "paused")) >= 3, timeout=20)
    assert len(program.calls("dana")) == calls
    assert "yes" in cli(db=room.db)
    assert "resumed" in cli("resume", "dana", "plan", db=room.db)
    await room.emu.wait_for(lambda: len(program.calls("dana")) > calls, timeout=20)


async def test_routines_run_fires_one_run_now(room: Room, fleet_factory: FleetFactory) -> None:
    program = TurnAgent.install(room.tmp)
    program.reply("dana", "on demand")
    write_routines(room, "dana", routine_toml(room.channel, every="1d"))
    await fleet_factory(["dana"], **fleet_keys(room, program))
    await room.emu.wait_for(
        lambda: room.sql("SELECT count(*) FROM routines WHERE instance = 'dana'") == [(1,)]
    )
    assert program.calls("dana") == []
    assert "asked for now" in cli("run", "dana", "plan", db=room.db)
    await room.emu.wait_for(lambda: statuses(room) == [("done", "")], timeout=20)
    assert len(program.calls("dana")) == 1
    history = cli("history", "dana", "plan", db=room.db)
    assert "done" in history


async def test_a_halted_room_skips_its_routine(room: Room, fleet_factory: FleetFactory) -> None:
    program = TurnAgent.install(room.tmp)
    write_routines(room, "dana", routine_toml(room.channel, every="1s"))
    await fleet_factory(["dana"], **fleet_keys(room, program))
    out = io.StringIO()
    assert admin.halt_main([room.channel, "--db", str(room.db)], out=out) == 0
    await room.emu.wait_for(lambda: statuses(room).count(("skipped", "room halted")) >= 2, timeout=20)
    calls = len(program.calls("dana"))
    await room.emu.wait_for(lambda: statuses(room).count(("skipped", "room halted")) >= 3, timeout=20)
    assert len(program.calls("dana")) == calls


async def test_a_malformed_routines_file_leaves_the_fleet_answering_mentions(
    room: Room, fleet_factory: FleetFactory
) -> None:
    program = TurnAgent.install(room.tmp)
    program.reply("dana", "still here")
    write_routines(room, "dana", '[[routine]\nname = "plan"\n')
    write_routines(
        room, "eli", routine_toml("C0NOSUCHROOM") + routine_toml(room.channel, name="ok", every="0s")
    )
    await fleet_factory(["dana", "eli"], **fleet_keys(room, program))
    await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} are you there?")
    dana = room.apps["dana"].bot_user_id
    await room.emu.wait_for(
        lambda: any(
            r.get("user") == dana for m in room.emu.conversation_messages(room.channel) for r in m["replies"]
        ),
        timeout=20,
    )
    assert room.sql("SELECT count(*) FROM routine_runs") == [(0,)]


async def test_a_sigkill_and_restart_leave_no_due_time_run_twice_and_the_gap_missed(
    emu: Emulator, tmp_path: Path
) -> None:
    alice = emu.add_user("alice")
    dana = emu.add_app("dana")
    conv = emu.create_conversation([alice.id, dana.bot_user_id, emu.add_app("eli").bot_user_id])
    program = TurnAgent.install(tmp_path)
    program.reply("dana", "tick {turn}")
    folder = tmp_path / "teammates" / "dana"
    folder.mkdir(parents=True)
    (folder / "routines.toml").write_text(routine_toml(conv.id, every="1s"))
    db = tmp_path / "data" / "nanoslack.db"
    env_file = write_fleet_env(
        tmp_path / ".env",
        emu,
        [dana],
        db,
        SLACK_A2A_ROOMS=conv.id,
        SLACK_OWNER=alice.id,
        LOG_FORMAT="json",
        NANOSLACK_TEAMMATES=str(tmp_path / "teammates"),
        **program.env(),
    )
    done = "SELECT count(*) FROM routine_runs WHERE status IN ('done', 'silent')"
    Store.open(sqlite_url(str(db))).close()  # the schema, before the fleet writes it
    first = FleetProcess.start(env_file)
    await emu.wait_for(lambda: scalar(db, done) >= 3, timeout=30)
    assert await first.kill() == -signal.SIGKILL
    killed_at = time.time()
    await asyncio.sleep(3.5)  # the gap: due times nobody holds
    second = FleetProcess.start(env_file)
    after = "SELECT count(*) FROM routine_runs WHERE status IN ('done', 'silent') AND due_at > ?"
    await emu.wait_for(lambda: scalar(db, after, killed_at + 3.5) >= 3, timeout=30)
    await second.stop()

    rows = sql(db, "SELECT due_at, status, reason, turn_id FROM routine_runs ORDER BY due_at")
    dues = [int(r[0]) for r in rows]
    assert dues == list(range(dues[0], dues[-1] + 1)), "a due time has no row, or two"
    gap = [r for r in rows if killed_at + 1 < r[0] < killed_at + 3]
    assert gap and all(r[1] == "missed" for r in gap), gap
    turns = [r[3] for r in rows if r[3] is not None]
    assert len(turns) == len(set(turns))
    # Every agent call is one run's turn: no due time reached the agent twice (a turn the
    # SIGKILL cut before its agent started has no call).
    assert len(turns) - 1 <= len(program.calls("dana")) <= len(turns)


async def test_two_processes_on_postgresql_holding_each_others_standby_fire_each_due_time_once(
    emu: Emulator, tmp_path: Path, pg_url: str
) -> None:
    alice = emu.add_user("alice")
    apps = [emu.add_app("dana"), emu.add_app("eli")]
    conv = emu.create_conversation([alice.id, *(a.bot_user_id for a in apps)])
    program = TurnAgent.install(tmp_path)
    for app in apps:
        folder = tmp_path / "teammates" / app.name
        folder.mkdir(parents=True)
        (folder / "routines.toml").write_text(routine_toml(conv.id, every="1s"))
    hosts = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        env_file = write_fleet_env(
            tmp_path / name / ".env",
            emu,
            apps,
            tmp_path / name / "unused.db",
            DATABASE_URL=pg_url,
            SLACK_A2A_ROOMS=conv.id,
            SLACK_OWNER=alice.id,
            LOG_FORMAT="json",
            NANOSLACK_LEASE_SECONDS="3",
            NANOSLACK_LEASE_HEARTBEAT="1",
            NANOSLACK_TEAMMATES=str(tmp_path / "teammates"),
            **program.env(),
        )
        hosts.append(FleetProcess.start(env_file))

    def rows(query: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(pg_url.replace("+psycopg", ""), autocommit=True) as conn:
            return list(conn.execute(query, params).fetchall())  # type: ignore[arg-type]

    def done(instance: str) -> int:
        try:
            found = rows(
                "SELECT count(*) FROM routine_runs WHERE instance = %s AND status IN ('done', 'silent')",
                instance,
            )
        except psycopg.errors.UndefinedTable:
            return 0
        return int(found[0][0])

    await emu.wait_for(lambda: done("dana") >= 3 and done("eli") >= 3, timeout=60)
    # The process holding dana stops: the other, its standby, takes dana over and goes on.
    holder = str(rows("SELECT holder FROM instance_leases WHERE instance = 'dana'")[0][0])
    leaving = next(h for h in hosts if f":{h.pid}:" in holder)
    assert await leaving.stop() == 0
    before = done("dana")
    await emu.wait_for(lambda: done("dana") >= before + 3, timeout=60)
    for h in hosts:
        await h.stop()

    for instance in ("dana", "eli"):
        found = rows("SELECT due_at, turn_id FROM routine_runs WHERE instance = %s ORDER BY due_at", instance)
        dues = [int(r[0]) for r in found]
        assert dues == list(range(dues[0], dues[-1] + 1)), f"{instance}: a due time has no row, or two"
        turns = [r[1] for r in found if r[1] is not None]
        assert len(turns) == len(set(turns))
        assert len(program.calls(instance)) == len(turns), f"{instance}: a due time reached the agent twice"


def _tool_names(request: Any) -> list[str]:
    return [t["function"]["name"] for t in (request.json or {}).get("tools", [])]


async def test_stop_routine_pauses_it_in_a_turn_its_owner_woke_and_is_not_offered_to_a_routines_own_turn(
    room: Room, fleet_factory: FleetFactory
) -> None:
    write_routines(room, "dana", routine_toml(room.channel, every="1d"))
    dm = room.emu.create_conversation([room.human.id, room.apps["dana"].bot_user_id], kind="im").id
    async with LLMServer() as llm:
        llm.openai.push(openai_answer(("stop_routine", {"name": "plan"})), openai_text("stopped"))
        llm.openai.default = openai_text()
        await fleet_factory(["dana"], **llm_keys(room, llm))
        await room.emu.wait_for(lambda: room.sql("SELECT count(*) FROM routines") == [(1,)])
        await room.emu.post_as_user(room.human.id, dm, "please stop your plan routine")
        await room.emu.wait_for(lambda: room.sql("SELECT paused FROM routines") == [(1,)], timeout=20)
        await room.emu.wait_for(lambda: len(llm.openai.requests) >= 2, timeout=20)
        assert "stop_routine" in _tool_names(llm.openai.requests[0])
        assert llm.openai.requests[1].tool_results()[0].startswith("routine plan paused")
        # The routine's own turn (asked for now: a pause does not stop that) is not offered it.
        cli("run", "dana", "plan", db=room.db)
        await room.emu.wait_for(lambda: len(llm.openai.requests) >= 3, timeout=20)
        assert "stop_routine" not in _tool_names(llm.openai.requests[2])


async def test_a_routines_file_written_while_the_fleet_runs_is_read_and_runs(
    room: Room, fleet_factory: FleetFactory
) -> None:
    program = TurnAgent.install(room.tmp)
    (room.tmp / "teammates" / "dana").mkdir(parents=True)
    await fleet_factory(["dana"], **fleet_keys(room, program))
    assert room.sql("SELECT count(*) FROM routines") == [(0,)]
    write_routines(room, "dana", routine_toml(room.channel, every="1s"))
    await room.emu.wait_for(lambda: program.calls("dana"), timeout=20)
    assert "every 1s" in cli(db=room.db)
    write_routines(room, "dana", routine_toml(room.channel, name="other", every="1h"))
    await room.emu.wait_for(
        lambda: "other" in cli(db=room.db) and "every 1s" not in cli(db=room.db), timeout=20
    )


async def test_a_mention_that_comes_while_a_routine_gets_ready_is_answered_before_the_routines_turn(
    room: Room, fleet_factory: FleetFactory
) -> None:
    program = TurnAgent.install(room.tmp)
    program.reply("dana", "on it")
    folder = room.tmp / "teammates" / "dana"
    # A gate held until the test lets it go: the run holds dana's one turn slot meanwhile.
    gate = gate_script(
        room, "dana", "held.sh", "touch gate.started\nwhile [ -e gate.hold ]; do sleep 0.02; done\nexit 0"
    )
    (folder / "gate.hold").touch()
    write_routines(room, "dana", routine_toml(room.channel, every="1d", gate=gate))
    await fleet_factory(["dana"], **fleet_keys(room, program, NANOSLACK_MAX_TURNS="1"))
    await room.emu.wait_for(lambda: room.sql("SELECT count(*) FROM routines") == [(1,)])
    cli("run", "dana", "plan", db=room.db)
    await room.emu.wait_for(lambda: (folder / "gate.started").exists(), timeout=20)
    mention = await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} status?")
    await room.emu.wait_for(
        lambda: room.sql("SELECT status FROM messages WHERE ts = ?", mention) == [("pending",)], timeout=20
    )
    (folder / "gate.hold").unlink()
    await room.emu.wait_for(lambda: len(program.calls("dana")) >= 2, timeout=20)
    first, second = program.calls("dana")[:2]
    assert "status?" in first["stdin"], "the routine's turn went ahead of a person's"
    assert second["stdin"].startswith('[Routine "plan"]')
    await room.emu.wait_for(lambda: statuses(room) == [("done", "")], timeout=20)
