"""Several ``nanoslack run`` processes on one PostgreSQL (docs/operations.md), against the
emulator: real subprocesses, a real server started by the suite (skipped with the
reason where no PostgreSQL binary exists).

Bot messages are posted with the bots' own tokens through the emulator's Web API,
as the bots' agents would.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from slack_sdk.web.async_client import AsyncWebClient

from nanoslack.emulator import App, Emulator, User
from nanoslack.fleetproc import FleetProcess, child_env
from nanoslack.testing.fleet_env import write_fleet_env
from nanoslack.testing.otlp import OtlpReceiver, ReceivedSpan
from nanoslack.testing.pg import PgServer


@dataclass
class Host:
    """One fleet process: its .env and, once started, the process."""

    name: str
    env_file: Path
    fleet: FleetProcess | None = None

    def start(self, failpoints: str = "") -> Host:
        self.fleet = FleetProcess.start(self.env_file, failpoints=failpoints)
        return self

    @property
    def proc(self) -> FleetProcess:
        assert self.fleet is not None, f"host {self.name} was never started"
        return self.fleet

    def events(self, name: str) -> list[dict[str, Any]]:
        return self.fleet.events(name) if self.fleet else []

    async def stop(self) -> int | None:
        return await self.fleet.stop() if self.fleet else None


@dataclass
class Site:
    """The emulated workspace, the shared database and the fleet processes."""

    emu: Emulator
    url: str
    tmp: Path
    alice: User
    apps: dict[str, App]
    room: str
    hosts: list[Host] = field(default_factory=list)

    def host(self, name: str, instances: list[str], **extra: str) -> Host:
        folder = self.tmp / name
        folder.mkdir()
        env_file = write_fleet_env(
            folder / ".env",
            self.emu,
            [self.apps[n] for n in instances],
            folder / "unused.db",
            DATABASE_URL=self.url,
            SLACK_A2A_ROOMS=self.room,
            SLACK_OWNER=self.alice.id,
            LOG_FORMAT="json",
            LOG_LEVEL="debug",
            **extra,
        )
        h = Host(name, env_file)
        self.hosts.append(h)
        return h

    def rows(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url.replace("+psycopg", ""), autocommit=True) as conn:
            return list(conn.execute(query, params).fetchall())  # type: ignore[arg-type]

    def inbox(self, instance: str, ts: str) -> tuple[str, str | None] | None:
        rows = self.rows(
            "SELECT status, reason FROM inbox WHERE instance = %s AND channel = %s AND ts = %s",
            instance,
            self.room,
            ts,
        )
        return (str(rows[0][0]), rows[0][1]) if rows and rows[0][0] != "received" else None

    async def bot_post(self, name: str, text: str) -> str:
        client = AsyncWebClient(token=self.apps[name].bot_token, base_url=self.emu.api_url)
        return str((await client.chat_postMessage(channel=self.room, text=text))["ts"])

    async def connected(self, *names: str) -> None:
        for n in names:
            await self.emu.wait_for(lambda n=n: self.emu.connections(self.apps[n].app_id) >= 1, timeout=30)

    def mention(self, name: str) -> str:
        return f"<@{self.apps[name].bot_user_id}>"


@pytest.fixture
async def site(pg_url: str, tmp_path: Path) -> AsyncIterator[Site]:
    async with Emulator(ack_timeout=1.0) as emu:
        alice = emu.add_user("alice", real_name="Alice")
        apps = {n: emu.add_app(n) for n in ("dana", "eli", "gus")}
        members = [alice.id, *(a.bot_user_id for a in apps.values())]
        room = emu.create_conversation(members, kind="mpim").id
        s = Site(emu, pg_url, tmp_path, alice, apps, room)
        try:
            yield s
        finally:
            for h in s.hosts:
                await h.stop()


async def _finished(site: Site, instance: str, ts: str) -> tuple[str, str | None]:
    result: tuple[str, str | None] = await site.emu.wait_for(lambda: site.inbox(instance, ts), timeout=30)
    return result


async def test_two_processes_in_one_room_stop_after_three_bot_messages_in_total_and_a_human_resets_both(
    site: Site,
) -> None:
    hops = {"SLACK_A2A_HOP_SCOPE": "room", "SLACK_A2A_MAX_HOPS": "3"}
    site.host("a", ["dana"], **hops).start()
    site.host("b", ["eli"], **hops).start()
    await site.connected("dana", "eli")

    async def volley(sender: str, receiver: str, n: int) -> str:
        ts = await site.bot_post(sender, f"bot message {n} from {sender}")
        status, reason = await _finished(site, receiver, ts)
        return status if status != "dropped" else f"dropped: {reason}"

    # dana and eli answer each other; each message is a hop of the room in either process.
    outcomes = [await volley(*pair, i) for i, pair in enumerate([("dana", "eli"), ("eli", "dana")] * 3)]
    assert outcomes[:3] == ["done"] * 3
    assert all(o.startswith("dropped: hop limit reached") for o in outcomes[3:]), outcomes
    assert site.rows("SELECT count(DISTINCT ts) FROM a2a_hops WHERE room = %s", site.room) == [(3,)]

    human = await site.emu.post_as_user(site.alice.id, site.room, "ok you two, one more round")
    for instance in ("dana", "eli"):
        await _finished(site, instance, human)
    assert await volley("eli", "dana", 7) == "done"
    assert await volley("dana", "eli", 8) == "done"


async def test_a_sigkilled_process_holding_an_instance_is_replaced_by_its_standby_within_the_lease_time(
    site: Site,
) -> None:
    lease = {"NANOSLACK_LEASE_SECONDS": "3", "NANOSLACK_LEASE_HEARTBEAT": "1"}
    first = site.host("a", ["dana"], **lease).start("pipeline.committed=kill@100")
    await site.connected("dana")
    await site.emu.wait_for(lambda: first.events("fleet started"), timeout=30)
    standby = site.host("b", ["dana"], **lease).start()
    await site.emu.wait_for(lambda: standby.events("instance standby: lease held"), timeout=30)
    assert standby.events("instance standby: lease held")[0]["holder"].split(":")[1] == str(first.proc.pid)

    texts = [f"{site.mention('dana')} n{i}" for i in range(300)]
    posted = await site.emu.bulk_post(site.alice.id, site.room, texts)
    assert await first.proc.wait(30) == -signal.SIGKILL
    died = time.monotonic()
    await site.emu.wait_for(lambda: standby.events("instance lease taken over"), timeout=10)
    assert time.monotonic() - died <= 3.0 + 1.0  # lease time, plus one standby poll

    done = "SELECT count(*) FROM inbox WHERE instance = 'dana' AND status = 'done'"
    await site.emu.wait_for(lambda: site.rows(done) == [(len(posted),)], timeout=60)
    runs = [first.events("message processed"), standby.events("message processed")]
    deliveries = Counter(e["ts"] for run in runs for e in run if e["status"] == "processed")
    assert set(deliveries) <= set(posted)
    assert not [ts for ts, n in deliveries.items() if n > 1], "a message went downstream twice"
    pending = "SELECT count(*) FROM messages WHERE instance = 'dana' AND status IN ('pending', 'done')"
    assert site.rows(pending) == [(len(posted),)]
    assert runs[1], "the standby had work left to do"
    assert await standby.stop() == 0
    assert site.rows("SELECT count(*) FROM instance_leases") == [(0,)]  # released on a clean stop


def _approval_dms(site: Site, app: str) -> list[dict[str, Any]]:
    emu = site.emu
    return [
        m
        for conv in emu.conversations()
        if conv.kind == "im" and site.alice.id in conv.members
        for m in emu.conversation_messages(conv.id)
        if m.get("bot_id") == site.apps[app].bot_id
    ]


async def test_an_approval_from_another_process_replays_a_held_message_of_an_instance_run_by_process_b_once(
    site: Site,
) -> None:
    site.host("b", ["eli"]).start()
    await site.connected("eli")
    opened = await site.emu.post_as_user(site.alice.id, site.room, f"{site.mention('eli')} meet gus")
    await _finished(site, "eli", opened)
    held = await site.bot_post("gus", f"{site.mention('eli')} may I join?")
    await _finished(site, "eli", held)
    status = "SELECT status FROM messages WHERE instance = 'eli' AND ts = %s"
    assert site.rows(status, held) == [("held",)]
    await site.emu.wait_for(lambda: _approval_dms(site, "eli"), timeout=30)

    gus = f"slack:bot:{site.apps['gus'].bot_id}"
    approve = [sys.executable, "-m", "nanoslack", "senders", "--db", site.url, "approve", "eli", gus]
    results = [
        await asyncio.to_thread(
            subprocess.run,
            approve,
            capture_output=True,
            text=True,
            env={**child_env(), "SLACK_INSTANCES": "eli"},
            timeout=60,
        )
        for _ in range(2)
    ]
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    assert "1 held message(s) released" in results[0].stdout
    # Released: waiting for a turn, or already answered by process B's silent agent.
    assert site.rows(status, held) in ([("pending",)], [("done",)])

    # Process B's poster, the owner of eli's outbox, closes the request in the DM.
    def answered() -> bool:
        return any("Allowed by" in str(m.get("text")) for m in _approval_dms(site, "eli"))

    await site.emu.wait_for(answered, timeout=30)
    assert len(_approval_dms(site, "eli")) == 1
    assert site.rows(
        "SELECT count(*) FROM messages WHERE instance = 'eli' AND status IN ('pending', 'done')"
    ) == [(2,)]
    nxt = await site.bot_post("gus", f"{site.mention('eli')} thanks, here is the rest")
    await _finished(site, "eli", nxt)
    assert site.rows(status, nxt) in ([("pending",)], [("done",)])


async def test_a_policy_change_made_with_psql_applies_to_the_next_message_of_a_running_fleet(
    site: Site, pg_server: PgServer
) -> None:
    site.host("a", ["dana"]).start()
    site.host("b", ["eli"]).start()
    await site.connected("dana", "eli")
    opened = await site.emu.post_as_user(site.alice.id, site.room, f"{site.mention('dana')} hi")
    await _finished(site, "dana", opened)
    status = "SELECT status FROM messages WHERE instance = 'dana' AND ts = %s"
    first = await site.bot_post("gus", f"{site.mention('dana')} hello")
    await _finished(site, "dana", first)
    assert site.rows(status, first) == [("held",)]

    await asyncio.to_thread(
        pg_server.psql,
        site.url,
        "UPDATE messaging_groups SET unknown_sender_policy='public'"
        f" WHERE platform_id='slack:{site.room}' AND instance='dana'",
    )
    second = await site.bot_post("gus", f"{site.mention('dana')} hello again")
    await _finished(site, "dana", second)
    assert site.rows(status, second) in ([("pending",)], [("done",)])


async def test_a_frozen_holder_loses_its_instance_to_the_standby_when_the_lease_lapses_and_stands_by(
    site: Site,
) -> None:
    """No crash this time: the holder is stopped (SIGSTOP), so its pid lives on and only the
    lease's lapse lets the standby in; once thawed, the old holder finds its lease gone,
    stops the instance and waits in turn. Every message is processed once."""
    lease = {"NANOSLACK_LEASE_SECONDS": "3", "NANOSLACK_LEASE_HEARTBEAT": "1"}
    first = site.host("a", ["dana"], **lease).start()
    await site.connected("dana")
    await site.emu.wait_for(lambda: first.events("fleet started"), timeout=30)
    second = site.host("b", ["dana"], **lease).start()
    await site.emu.wait_for(lambda: second.events("instance standby: lease held"), timeout=30)
    before = await site.emu.bulk_post(
        site.alice.id, site.room, [f"{site.mention('dana')} a{i}" for i in range(50)]
    )
    done = "SELECT count(*) FROM inbox WHERE instance = 'dana' AND status = 'done'"
    await site.emu.wait_for(lambda: site.rows(done) == [(len(before),)], timeout=30)

    first.proc.send_signal(signal.SIGSTOP)
    frozen = time.monotonic()
    try:
        await site.emu.wait_for(lambda: second.events("instance lease taken over"), timeout=15)
        took = time.monotonic() - frozen
        during = await site.emu.bulk_post(
            site.alice.id, site.room, [f"{site.mention('dana')} b{i}" for i in range(50)]
        )
    finally:
        first.proc.send_signal(signal.SIGCONT)
    assert 3.0 - 1.5 <= took <= 3.0 + 2.0, took  # the lease had to lapse: no shortcut for a live pid
    await site.emu.wait_for(lambda: first.events("instance lease lost"), timeout=15)
    await site.emu.wait_for(lambda: len(first.events("instance standby: lease held")) >= 1, timeout=15)
    after = await site.emu.bulk_post(
        site.alice.id, site.room, [f"{site.mention('dana')} c{i}" for i in range(50)]
    )
    posted = before + during + after
    await site.emu.wait_for(lambda: site.rows(done) == [(len(posted),)], timeout=60)

    def deliveries() -> Counter[str]:
        runs = [first.events("message processed"), second.events("message processed")]
        return Counter(e["ts"] for run in runs for e in run if e["status"] == "processed")

    # A batch's "message processed" lines are written just after its commit: wait for them.
    await site.emu.wait_for(lambda: sum(deliveries().values()) >= len(posted), timeout=10)
    runs = [first.events("message processed"), second.events("message processed")]
    delivered = deliveries()
    assert sorted(delivered) == sorted(posted)
    assert not [ts for ts, n in delivered.items() if n > 1], "a message went downstream twice"
    assert {e["ts"] for e in runs[1]} >= set(after), "the new holder runs the instance"


def _handoff_scripts(site: Site) -> None:
    """dana hands "please build it" to eli when asked to hand it over; eli answers it."""
    dispatch = {
        "match": "hand it over",
        "from": "human",
        "calls": [{"tool": "send_to_agent", "arguments": {"to": "eli", "message": "please build it"}}],
        "reply": None,
    }
    answer = {"match": "please build it", "from": "agent", "reply": "eli here: built."}
    for name, rules in (("dana", [dispatch]), ("eli", [answer])):
        (site.tmp / f"{name}.json").write_text(json.dumps({"rules": rules, "default": None}))


async def test_a_handoff_to_an_instance_another_process_runs_is_answered_there_once(site: Site) -> None:
    _handoff_scripts(site)
    common = {"NANOSLACK_A2A_ALLOW": "dana>eli", "NANOSLACK_AGENT": "script"}
    site.host("a", ["dana"], NANOSLACK_AGENT_SCRIPT=str(site.tmp / "dana.json"), **common).start()
    site.host("b", ["eli"], NANOSLACK_AGENT_SCRIPT=str(site.tmp / "eli.json"), **common).start()
    await site.connected("dana", "eli")

    ask = await site.emu.post_as_user(site.alice.id, site.room, f"{site.mention('dana')} hand it over to eli")

    def answers() -> list[dict[str, Any]]:
        return [
            r
            for top in site.emu.conversation_messages(site.room)
            if top["ts"] == ask
            for r in top["replies"]
            if r.get("bot_id") == site.apps["eli"].bot_id
        ]

    await site.emu.wait_for(lambda: answers(), timeout=30)
    done = "SELECT count(*) FROM turns WHERE instance = 'eli' AND status IN ('done', 'silent')"
    await site.emu.wait_for(lambda: site.rows(done) == [(1,)], timeout=30)
    assert [r["text"] for r in answers()] == ["eli here: built."]
    assert site.rows("SELECT from_instance, to_instance, depth FROM handoffs") == [("dana", "eli", 1)]
    assert site.rows("SELECT count(*) FROM turns WHERE instance = 'eli'") == [(1,)]


async def test_a_handoff_across_two_processes_is_one_trace_the_recipients_turn_under_the_handing_call(
    site: Site,
) -> None:
    _handoff_scripts(site)
    async with OtlpReceiver() as otlp:
        common = {
            "NANOSLACK_A2A_ALLOW": "dana>eli",
            "NANOSLACK_AGENT": "script",
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
        for host, name in (("a", "dana"), ("b", "eli")):
            script = str(site.tmp / f"{name}.json")
            site.host(host, [name], NANOSLACK_AGENT_SCRIPT=script, OTEL_SERVICE_NAME=f"host-{host}", **common)
        for h in site.hosts:
            h.start()
        await site.connected("dana", "eli")
        await site.emu.post_as_user(site.alice.id, site.room, f"{site.mention('dana')} hand it over to eli")

        def turns(spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
            found = [s for s in spans if s.name == "turn"]
            return found if {s.service for s in found} == {"host-a", "host-b"} else []

        dana_turn, eli_turn = sorted(await otlp.wait_for(turns, within=30), key=lambda s: s.service)
        handing = await otlp.wait_for(lambda s: [x for x in s if x.name == "execute_tool send_to_agent"])

    assert dana_turn.attributes["nanoslack.instance"] == "dana"
    assert dana_turn.attributes["nanoslack.trigger"] == "person" and dana_turn.parent_span_id == ""
    assert eli_turn.attributes["nanoslack.instance"] == "eli"
    assert eli_turn.attributes["nanoslack.trigger"] == "handoff"
    # One trace across both processes: eli's turn hangs under dana's send_to_agent call.
    (call,) = handing
    assert call.service == "host-a" and call.parent_span_id == dana_turn.span_id
    assert eli_turn.trace_id == dana_turn.trace_id == call.trace_id
    assert eli_turn.parent_span_id == call.span_id
    ((kept,),) = site.rows("SELECT traceparent FROM handoffs")
    assert kept.startswith(f"00-{call.trace_id}-{call.span_id}-")  # W3C traceparent
