"""The fleet survives its database (docs/operations.md): a PostgreSQL restart, an outage of
several seconds, a killed backend connection while the fleet works, a SQLite file
that cannot be written. Nothing is lost, nothing is answered twice.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
import structlog

from nanoslack.emulator import App, Emulator, User
from nanoslack.fleetproc import FleetProcess
from nanoslack.store import Store
from nanoslack.testing.fleet_env import write_fleet_env
from nanoslack.testing.pg import PgServer
from tests.e2e.conftest import FleetFactory, Room

MESSAGES = 1000
# One message in this many mentions dana and is answered (a turn, a reply); the others
# are room context: every message goes through the pipeline, a tenth of them to a turn.
MENTION_EVERY = 10
REPLY = "done"


@dataclass
class PgFleet:
    emu: Emulator
    pg: PgServer
    url: str
    tmp: Path
    alice: User
    dana: App
    room: str
    fleets: list[FleetProcess] = field(default_factory=list)

    def start(self, **extra: str) -> FleetProcess:
        rules = self.tmp / "reply.json"
        rules.write_text(json.dumps({"rules": [], "default": REPLY}))
        env = write_fleet_env(
            self.tmp / ".env",
            self.emu,
            [self.dana],
            self.tmp / "unused.db",
            DATABASE_URL=self.url,
            SLACK_A2A_ROOMS=self.room,
            SLACK_OWNER=self.alice.id,
            NANOSLACK_AGENT_SCRIPT=str(rules),
            NANOSLACK_POST_RATE="0",
            LOG_FORMAT="json",
            **extra,
        )
        fleet = FleetProcess.start(env)
        self.fleets.append(fleet)
        return fleet

    def rows(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url.replace("+psycopg", ""), autocommit=True) as conn:
            return list(conn.execute(query, params).fetchall())  # type: ignore[arg-type]

    def count(self, query: str, *params: Any) -> int:
        return int(self.rows(query, *params)[0][0])

    async def post(self, n: int, start: int = 0) -> list[str]:
        """``n`` messages from alice; every ``MENTION_EVERY``-th mentions dana. Their ts."""
        texts = [
            f"<@{self.dana.bot_user_id}> m{i}" if i % MENTION_EVERY == 0 else f"m{i}"
            for i in range(start, start + n)
        ]
        return await self.emu.bulk_post(self.alice.id, self.room, texts)

    def replies(self) -> Counter[str]:
        """dana's replies per thread parent."""
        out: Counter[str] = Counter()
        for top in self.emu.conversation_messages(self.room):
            for r in top.get("replies") or []:
                if r.get("bot_id") == self.dana.bot_id:
                    out[top["ts"]] += 1
        return out


@pytest.fixture
async def pgfleet(pg_server: PgServer, pg_url: str, tmp_path: Path) -> AsyncIterator[PgFleet]:
    async with Emulator() as emu:
        alice = emu.add_user("alice")
        dana, eli = emu.add_app("dana"), emu.add_app("eli")
        room = emu.create_conversation([alice.id, dana.bot_user_id, eli.bot_user_id]).id
        f = PgFleet(emu, pg_server, pg_url, tmp_path, alice, dana, room)
        try:
            yield f
        finally:
            if not pg_server_running(pg_server):
                pg_server.start_server()
            for fleet in f.fleets:
                await fleet.stop()


def pg_server_running(pg: PgServer) -> bool:
    try:
        psycopg.connect(pg.url("postgres", driver="postgresql"), connect_timeout=2).close()
    except psycopg.OperationalError:
        return False
    return True


def _mentions(posted: list[str]) -> list[str]:
    return posted[::MENTION_EVERY]


async def _all_answered(f: PgFleet, posted: list[str], within: float) -> None:
    """Until every message went through the pipeline and every mention has its reply in
    Slack, its outbox row marked sent. The checks run on the emulator's loop: every half
    second, so the fleet's posts are served meanwhile."""
    done = "SELECT count(*) FROM inbox WHERE instance = 'dana' AND status <> 'received'"
    await f.emu.wait_for(lambda: f.count(done) >= len(posted), timeout=within, interval=0.5)
    sent = "SELECT count(*) FROM outbox WHERE status = 'sent'"
    mentions = len(_mentions(posted))
    await f.emu.wait_for(lambda: f.count(sent) >= mentions, timeout=within, interval=0.5)
    await f.emu.wait_for(lambda: len(f.replies()) >= mentions, timeout=within, interval=0.5)


def _answered_once(f: PgFleet, posted: list[str]) -> None:
    """What a user sees: every message went through the pipeline once (its inbox entry
    done, one row in the room's history), every mention has exactly one reply, and a
    turn that finished it."""
    assert f.rows("SELECT status, count(*) FROM inbox WHERE instance = 'dana' GROUP BY status") == [
        ("done", len(posted))
    ]
    kept = Counter(str(r[0]) for r in f.rows("SELECT ts FROM messages WHERE instance = 'dana'"))
    assert sorted(kept) == sorted(posted) and set(kept.values()) == {1}
    mentions = _mentions(posted)
    finished = "SELECT thread_key FROM turns WHERE instance = 'dana' AND status = 'done'"
    done = {str(r[0]) for r in f.rows(finished)}
    assert done == set(mentions)
    replies = f.replies()
    assert sorted(replies) == sorted(mentions)
    assert not [ts for ts, n in replies.items() if n > 1], "a reply was posted twice"


def _once_each(f: PgFleet, posted: list[str]) -> None:
    """As ``_answered_once``, and every mention went to exactly one turn: true whenever
    the instance kept its lease (a lost lease abandons and reruns, two rows for one)."""
    _answered_once(f, posted)
    turns = Counter(str(r[0]) for r in f.rows("SELECT thread_key FROM turns WHERE instance = 'dana'"))
    assert sorted(turns) == sorted(_mentions(posted))
    assert not [t for t, n in turns.items() if n > 1], "a message was answered by two turns"
    assert f.rows("SELECT DISTINCT status FROM turns") == [("done",)]


async def _connected(f: PgFleet) -> None:
    await f.emu.wait_for(lambda: f.emu.connections(f.dana.app_id) >= 1, timeout=30)


async def _some_done(f: PgFleet, n: int) -> None:
    """Until ``n`` messages went through the pipeline: the fleet is mid-stream."""
    done = "SELECT count(*) FROM inbox WHERE instance = 'dana' AND status = 'done'"
    await f.emu.wait_for(lambda: f.count(done) >= n, timeout=30, interval=0.1)


async def test_a_postgresql_restart_mid_stream_loses_nothing_and_answers_each_message_once(
    pgfleet: PgFleet,
) -> None:
    f = pgfleet
    fleet = f.start()
    await _connected(f)
    posted = await f.post(MESSAGES)
    await _some_done(f, 100)
    await asyncio.to_thread(f.pg.restart)
    await _all_answered(f, posted, within=90)
    _once_each(f, posted)
    assert fleet.events("store unavailable")
    assert not fleet.events("instance lease lost")


async def test_an_eight_second_postgresql_outage_mid_stream_loses_nothing_and_answers_each_message_once(
    pgfleet: PgFleet,
) -> None:
    """Shorter than the lease (15 s): the instance keeps its lease and its socket; what
    arrives meanwhile waits unacked in the socket, and the fleet goes on by itself."""
    f = pgfleet
    fleet = f.start()
    await _connected(f)
    first = await f.post(MESSAGES // 2)
    await _some_done(f, 50)
    await asyncio.to_thread(f.pg.stop_server)
    try:
        acked = f.emu.stats(f.dana.app_id).acked
        second = await f.post(400, start=MESSAGES // 2)
        await asyncio.sleep(8)  # the outage itself: nothing to wait for but the clock
        assert f.emu.stats(f.dana.app_id).acked == acked, "events acked while nothing could be recorded"
    finally:
        await asyncio.to_thread(f.pg.start_server)
    later = await f.post(100, start=MESSAGES // 2 + 400)  # and the fleet goes on
    posted = first + second + later
    assert len(posted) == MESSAGES
    await _all_answered(f, posted, within=90)
    _once_each(f, posted)
    # Which stages notice depends on what was in flight when the server stopped (a
    # drained pipeline never does): only that some did, and said why.
    unavailable = fleet.events("store unavailable")
    assert unavailable and all(e["reason"] for e in unavailable)
    assert fleet.events("store available again")
    assert not fleet.events("instance lease lost")


async def test_backend_connections_killed_while_the_fleet_works_cost_no_message_and_no_reply(
    pgfleet: PgFleet,
) -> None:
    f = pgfleet
    fleet = f.start()
    await _connected(f)
    # Enough work that the kills land mid-transaction: between two transactions a killed
    # connection is replaced unseen (pool_pre_ping), and 300 messages drain in well under
    # a second.
    posted = await f.post(MESSAGES)
    await _some_done(f, 100)
    killed = await _kill_backends_while_working(f, posted, kills=4)
    assert killed >= 4
    await _all_answered(f, posted, within=90)
    _once_each(f, posted)
    assert fleet.events("store unavailable")


async def _kill_backends_while_working(f: PgFleet, posted: list[str], *, kills: int) -> int:
    """Kill the fleet's backend connections until ``kills`` sessions died, each kill
    after the fleet did more work; more messages are posted (appended to ``posted``)
    whenever it is close to idle. A kill just after another may find no connection open
    yet: it is retried, not counted."""
    done = "SELECT count(*) FROM inbox WHERE instance = 'dana' AND status = 'done'"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 90
    killed = 0
    while killed < kills:
        assert loop.time() < deadline, f"only {killed} backend sessions killed in 90 s"
        if f.count(done) >= len(posted) - 50:
            posted += await f.post(200, start=len(posted))
        now = await asyncio.to_thread(f.pg.terminate_backends, f.url)
        killed += now
        if now:
            await _some_done(f, min(f.count(done) + 50, len(posted)))
        else:
            await asyncio.sleep(0.05)  # poll interval: no connection open yet
    return killed


async def test_an_outage_longer_than_the_lease_stops_the_instance_which_takes_its_lease_back_after(
    pgfleet: PgFleet,
) -> None:
    """Unrenewed for a whole lease (3 s here), the instance is handled as lost: stopped,
    then a standby of itself; once the database answers it takes its lease back, resumes
    what it recorded and Slack redelivers what it never acked."""
    f = pgfleet
    fleet = f.start(NANOSLACK_LEASE_SECONDS="3", NANOSLACK_LEASE_HEARTBEAT="1")
    await _connected(f)
    first = await f.post(100)
    await _some_done(f, 20)
    await asyncio.to_thread(f.pg.stop_server)
    try:
        await fleet.wait_for_event("instance lease lost", within=15)
        second = await f.post(100, start=100)
        await asyncio.sleep(4)  # the rest of the 8-second outage
    finally:
        await asyncio.to_thread(f.pg.start_server)
    # Stopped, then running again: through a standby's takeover, or at once when the
    # database was back before the instance had finished stopping.
    await f.emu.wait_for(lambda: len(fleet.events("instance ready")) >= 2, timeout=30, interval=0.1)
    posted = first + second
    await _all_answered(f, posted, within=90)
    # Turns the lost lease abandoned are rerun (two rows for one message): what counts
    # is that each message got exactly one reply.
    _answered_once(f, posted)


# -- SQLite ---------------------------------------------------------------------------------


def _cannot_write(store: Store, fault: str) -> None:
    """Make the fleet's own connection unable to write (both PRAGMAs are per connection):
    ``full`` caps the file at the pages it has (SQLite answers "database or disk is
    full" as on a full disk), ``read-only`` refuses every write ("attempt to write a
    readonly database", as a file mounted read-only does: even BEGIN IMMEDIATE fails)."""
    raw = store.db.driver()  # the fault must hit the fleet's connection
    if fault == "full":
        pages = raw.execute("PRAGMA page_count").fetchone()[0]
        raw.execute(f"PRAGMA max_page_count = {pages}")
    else:
        raw.execute("PRAGMA query_only = ON")


def _can_write_again(store: Store, fault: str) -> None:
    raw = store.db.driver()
    raw.execute("PRAGMA max_page_count = 1073741823" if fault == "full" else "PRAGMA query_only = OFF")


def _sqlite_replies(room: Room, parents: list[str]) -> Counter[str]:
    """dana's replies under each of ``parents`` that has any."""
    out: Counter[str] = Counter()
    for top in room.emu.conversation_messages(room.channel):
        if top["ts"] in parents:
            for r in top.get("replies") or []:
                if r.get("bot_id") == room.apps["dana"].bot_id:
                    out[top["ts"]] += 1
    return out


@pytest.mark.emulator(max_retries=1)  # Slack gives up sooner: the pump's hold is all there is
@pytest.mark.parametrize("fault", ["full", "read-only"])
async def test_a_sqlite_database_that_cannot_be_written_loses_nothing_and_the_fleet_recovers_by_itself(
    room: Room, fleet_factory: FleetFactory, fault: str
) -> None:
    rules = room.tmp / "reply.json"
    rules.write_text(json.dumps({"rules": [], "default": REPLY}))
    fleet, _ = await fleet_factory(
        ["dana"], SLACK_OWNER=room.human.id, NANOSLACK_AGENT_SCRIPT=str(rules), NANOSLACK_POST_RATE="0"
    )
    dana = room.apps["dana"]

    async def post(names: range) -> list[str]:
        texts = [f"{room.mention('dana')} m{i}" for i in names]
        return await room.emu.bulk_post(room.human.id, room.channel, texts)

    before = await post(range(10))
    await room.emu.wait_for(lambda: len(_sqlite_replies(room, before)) == 10, timeout=30)
    acked = room.emu.stats(dana.app_id).acked
    with structlog.testing.capture_logs() as logs:
        _cannot_write(fleet.store, fault)
        during = await post(range(10, 50))

        def held() -> list[dict[str, Any]]:
            return [e for e in logs if e["event"] == "store unavailable" and e["where"] == "inbox"]

        [unavailable] = await room.emu.wait_for(held, timeout=30)
        expected = "database or disk is full" if fault == "full" else "attempt to write a readonly database"
        assert expected in unavailable["reason"]
        # What could not be recorded is not acked (each mention is two envelopes: the
        # message and its app_mention twin): Slack keeps it, and so does the pump.
        assert room.emu.stats(dana.app_id).acked - acked < 2 * len(during)
        # Kept unwritable until Slack gave up redelivering some of them: from then on
        # only the batch the pump holds has them.
        hub = room.emu.engine.hub
        given_up = hub.dropped
        await room.emu.wait_for(lambda: hub.dropped > given_up, timeout=30)
        assert room.emu.stats(dana.app_id).acked - acked < 2 * len(during)
        _can_write_again(fleet.store, fault)
        posted = before + during
        await room.emu.wait_for(lambda: len(_sqlite_replies(room, posted)) == len(posted), timeout=60)
        await room.emu.wait_for(
            lambda: [e for e in logs if e["event"] == "store available again" and e["where"] == "inbox"],
            timeout=30,
        )
    replies = _sqlite_replies(room, posted)
    assert sorted(replies) == sorted(posted)
    assert set(replies.values()) == {1}, "a reply was posted twice"
    rows = room.sql("SELECT status, count(*) FROM inbox WHERE instance = 'dana' GROUP BY status")
    assert rows == [("done", len(posted))]
    turns = room.sql("SELECT thread_key, count(*) FROM turns WHERE instance = 'dana' GROUP BY thread_key")
    assert sorted(t for t, _ in turns) == sorted(posted) and {n for _, n in turns} == {1}
