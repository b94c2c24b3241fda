"""The reliability contract (docs/architecture.md), all at once, with agents answering.

Three bots (dana, eli, fay) run ``command`` agents (``soak_agent.py``) in one real
``nanoslack run`` process; alice talks to them in an A2A room, mentioning them at
random, top level and in threads; their replies mention each other, so bots wake
bots until the hop limit pauses the room. The same bots also post in a room that is
not in ``SLACK_A2A_ROOMS``. Meanwhile the emulator drops sockets, asks for
``refresh_requested`` reconnects, withholds acks and fails ``chat.postMessage``
(429 storms and transient errors), and the fleet is SIGKILLed at random moments and
restarted. Once everything has settled, the emulator's record and the store must show:

- every message that woke an agent (human, or admitted bot) was answered by exactly
  one *recorded* turn (a turn may run again after a kill that hit before its output
  was recorded: docs/architecture.md "Replies exactly once"), and nothing Slack delivered was lost;
- every message a turn consumed was in its agent's prompt (a mention marked ``done``
  that no agent was ever shown is lost all the same);
- no reply was posted twice (outbox keys in the posts' metadata);
- no bot message from the other room reached an agent;
- no instance was ever admitted more than ``SLACK_A2A_MAX_HOPS`` consecutive bot
  messages in the room;
- no token appears in any log line (``LOG_LEVEL=debug``).

Short form in the normal suite; ``NANOSLACK_SOAK=1`` runs the long one
(``NANOSLACK_SOAK_SEED`` replays a seed; the seed is always printed).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import sqlite3
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from nanoslack.emulator import App, Emulator, User
from nanoslack.fleetproc import FleetProcess
from nanoslack.store import Store, sqlite_url
from nanoslack.testing.fleet_env import write_fleet_env

BOTS = ("dana", "eli", "fay")
MAX_HOPS = 4
AGENT = Path(__file__).with_name("soak_agent.py")
TOKEN_SHAPE = re.compile(r"xox[a-z]-[A-Za-z0-9-]{6,}|xapp-[A-Za-z0-9-]{6,}")

# Counters written by triggers inside the fleet's own transactions, so a transaction
# lost to a SIGKILL leaves no trace in them, and a committed one always does.
TRIGGERS = """
CREATE TABLE soak_consumed (instance TEXT, channel TEXT, ts TEXT);
CREATE TRIGGER soak_count_consumed AFTER UPDATE OF status ON messages
WHEN OLD.status = 'pending' AND NEW.status = 'done'
BEGIN INSERT INTO soak_consumed VALUES (NEW.instance, NEW.channel, NEW.ts); END;

CREATE TABLE soak_hops (room TEXT, instance TEXT, ts TEXT, held INTEGER);
CREATE TRIGGER soak_count_hops AFTER INSERT ON a2a_hops
BEGIN INSERT INTO soak_hops VALUES (NEW.room, NEW.instance, NEW.ts,
  (SELECT count(*) FROM a2a_hops WHERE room = NEW.room AND instance = NEW.instance)); END;

CREATE TABLE soak_enqueued (dedupe_key TEXT);
CREATE TRIGGER soak_count_enqueued AFTER INSERT ON outbox
BEGIN INSERT INTO soak_enqueued VALUES (NEW.dedupe_key); END;
"""


@dataclass(frozen=True)
class Plan:
    messages: int
    kills: int
    seed: int


@dataclass
class Soak:
    """One soak's world: the emulator, the fleet process and what the test did."""

    emu: Emulator
    tmp: Path
    plan: Plan
    alice: User
    apps: dict[str, App]
    room: str
    outside: str
    fleet: FleetProcess | None = None
    runs: list[FleetProcess] = field(default_factory=list)
    human_posts: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)  # (ts, mentioned)
    outside_posts: list[tuple[str, str]] = field(default_factory=list)  # (ts, author)
    kills: int = 0
    faults: Counter[str] = field(default_factory=Counter)

    @property
    def db(self) -> Path:
        return self.tmp / "data" / "nanoslack.db"

    @property
    def agent_log(self) -> Path:
        return self.tmp / "agent.log"

    @property
    def env_file(self) -> Path:
        return self.tmp / ".env"

    def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(self.db, timeout=10)
        try:
            return conn.execute(query, params).fetchall()
        finally:
            conn.close()

    def scalar(self, query: str, *params: Any) -> int:
        return int(self.sql(query, *params)[0][0])


# -- the world ---------------------------------------------------------------------------------


def _world(emu: Emulator, tmp: Path, plan: Plan) -> Soak:
    alice = emu.add_user("alice", real_name="Alice")
    apps = {name: emu.add_app(name) for name in BOTS}
    members = [alice.id, *(a.bot_user_id for a in apps.values())]
    room = emu.create_conversation(members, kind="mpim").id
    outside = emu.create_conversation([a.bot_user_id for a in apps.values()], kind="mpim").id
    soak = Soak(emu, tmp, plan, alice, apps, room, outside)
    write_fleet_env(
        soak.env_file,
        emu,
        list(apps.values()),
        soak.db,
        NANOSLACK_AGENT_COMMAND=f"{sys.executable} -S {AGENT} {soak.agent_log}",
        SLACK_A2A_ROOMS=room,
        SLACK_A2A_MAX_HOPS=str(MAX_HOPS),
        # Paced, but faster than Slack's 1 a second per channel: three bots that wake each
        # other post several times a second for minutes, which Slack's pace would take a
        # quarter of an hour to send (the settle window is sized for the work, not the pace;
        # pacing has its own tests). Queued posts still cross every kill.
        NANOSLACK_POST_RATE="10",
        LOG_LEVEL="debug",
        LOG_FORMAT="json",
    )
    store = Store.open(sqlite_url(str(soak.db)))  # the fleet's schema, before the fleet runs
    try:
        for name in BOTS:  # open-room --public: every sender passes the gate here
            store.groups.ensure_public_room(f"slack:{room}", name)
    finally:
        store.close()
    conn = sqlite3.connect(soak.db, timeout=10)
    try:
        conn.executescript(TRIGGERS)
    finally:
        conn.close()
    return soak


def _start(soak: Soak) -> None:
    soak.fleet = FleetProcess.start(soak.env_file)
    soak.runs.append(soak.fleet)


async def _kill_and_restart(soak: Soak) -> None:
    assert soak.fleet is not None
    assert soak.fleet.running, (
        f"the fleet died on its own (exit {soak.fleet.returncode})\n{soak.fleet.tail()}"
    )
    await soak.fleet.kill(10)
    soak.kills += 1
    _start(soak)


# -- what the test does while the fleet runs ---------------------------------------------------


async def _talk(soak: Soak, rng: random.Random, kill_at: set[int]) -> None:
    """alice's messages (and the bots' posts in the other room), with kills among them."""
    emu, names = soak.emu, list(BOTS)
    for i in range(soak.plan.messages):
        mentioned = tuple(rng.sample(names, 1 if rng.random() < 0.8 else 2))
        text = " ".join(f"<@{soak.apps[n].bot_user_id}>" for n in mentioned) + f" task {i}: your view?"
        roots = [ts for ts, _ in soak.human_posts[-30:]]
        thread = rng.choice(roots) if roots and rng.random() < 0.3 else None
        ts = await emu.post_as_user(soak.alice.id, soak.room, text, thread_ts=thread)
        soak.human_posts.append((ts, mentioned))
        if rng.random() < 0.15:
            author, target = rng.sample(names, 2)
            bot = soak.apps[author].bot_user_id
            out_text = f"<@{soak.apps[target].bot_user_id}> over here, item {i}"
            soak.outside_posts.append((await emu.post_as_user(bot, soak.outside, out_text), author))
        if i in kill_at:
            await asyncio.sleep(rng.uniform(0.0, 0.5))
            await _kill_and_restart(soak)
        # Mostly a steady trickle, sometimes a lull in which the bots talk among
        # themselves up to the hop limit.
        await asyncio.sleep(rng.uniform(1.0, 2.5) if rng.random() < 0.04 else rng.uniform(0.0, 0.08))


async def _inject_faults(soak: Soak, rng: random.Random) -> None:
    emu = soak.emu
    while True:
        await asyncio.sleep(rng.uniform(0.3, 1.5))
        app = soak.apps[rng.choice(BOTS)].app_id
        fault = rng.choice(["drop", "refresh", "withhold", "ratelimited", "internal_error"])
        soak.faults[fault] += 1
        if fault == "drop":
            await emu.drop_sockets(app)
        elif fault == "refresh":
            await emu.send_disconnect(app, "refresh_requested")
        elif fault == "withhold":
            emu.withhold_acks(app, rng.randint(1, 5))
        elif fault == "ratelimited":
            emu.fail_next("chat.postMessage", rng.randint(1, 3), error="ratelimited", retry_after=1)
        else:
            emu.fail_next("chat.postMessage", rng.randint(1, 2), error="internal_error")


def _quiet(soak: Soak) -> tuple[int, ...] | None:
    """A fingerprint of the work done when nothing is in flight anywhere, else None."""
    hub = soak.emu.engine.hub
    if any(s.pending or s.queue for s in hub.apps.values()):
        return None
    unfinished = soak.scalar(
        "SELECT (SELECT count(*) FROM inbox WHERE status = 'received')"
        " + (SELECT count(*) FROM messages WHERE status = 'pending')"
        " + (SELECT count(*) FROM outbox WHERE status IN ('queued', 'sending'))"
        " + (SELECT count(*) FROM turns WHERE status = 'running')"
    )
    if unfinished or any(s.pending or s.queue for s in hub.apps.values()):
        return None
    return (
        soak.scalar("SELECT count(*) FROM inbox"),
        soak.scalar("SELECT count(*) FROM outbox"),
        soak.scalar("SELECT count(*) FROM turns"),
        sum(s.stats.delivered for s in hub.apps.values()),
    )


async def _settle(soak: Soak, within: float) -> None:
    """Wait until nothing is in flight and nothing moved for 2.5 s: the fleet's
    pollers (turns every 1 s, the poster every 2 s) would have picked up any work."""
    seen: list[tuple[tuple[int, ...], float]] = []

    def settled() -> bool:
        assert soak.fleet is not None and soak.fleet.running, (
            f"the fleet died on its own\n{soak.fleet.tail()}"
        )
        print_ = _quiet(soak)
        if print_ is None:
            seen.clear()
            return False
        if not seen or seen[0][0] != print_:
            seen[:] = [(print_, time.monotonic())]
            return False
        return time.monotonic() - seen[0][1] >= 2.5

    await soak.emu.wait_for(settled, timeout=within, interval=0.25, message="the fleet never settled")


async def _soak(tmp: Path, plan: Plan) -> Soak:
    print(f"soak: seed={plan.seed} messages={plan.messages} kills={plan.kills}")
    # Slack retries an unacked event for minutes; the emulator's default gives up after
    # three quick retries, which a fleet killed mid-burst can outlast. Give it Slack's
    # patience, and check at the end that it never gave up (a loss would be ours).
    async with Emulator(ack_timeout=2.0, max_retries=50) as emu:
        soak = _world(emu, tmp, plan)
        rng = random.Random(plan.seed)
        kill_at = set(rng.sample(range(5, plan.messages - 5), plan.kills))
        _start(soak)
        await emu.wait_for(lambda: all(emu.connections(a.app_id) for a in soak.apps.values()), timeout=30)
        faults = asyncio.create_task(_inject_faults(soak, random.Random(plan.seed + 1)))
        try:
            await _talk(soak, rng, kill_at)
        finally:
            faults.cancel()
        for app in soak.apps.values():
            emu.withhold_acks(app.app_id, 0)
        try:
            await _settle(soak, within=60 + plan.messages / 10)
        finally:
            assert soak.fleet is not None
            code = await soak.fleet.stop(30)
        assert code == 0, f"the fleet did not stop cleanly (exit {code})"
        assert emu.engine.hub.dropped == 0, "the emulator gave up redelivering an event"
        _check(soak)
        return soak


# -- the checks --------------------------------------------------------------------------------


def _agent_turns(soak: Soak) -> list[dict[str, str]]:
    return [json.loads(line) for line in soak.agent_log.read_text().splitlines() if line]


def _check(soak: Soak) -> None:
    _check_nothing_lost(soak)
    _check_one_turn_per_message(soak)
    _check_every_answered_message_was_shown(soak)
    _check_replies_posted_once(soak)
    _check_other_room_never_reached_an_agent(soak)
    _check_hop_limit(soak)
    _check_no_token_in_logs(soak)
    _report(soak)


def _check_nothing_lost(soak: Soak) -> None:
    """Every message in either room reached every other bot's inbox and was finished."""
    by_user = {a.bot_user_id: name for name, a in soak.apps.items()}
    inbox = {(r[0], r[1], r[2]): r[3] for r in soak.sql("SELECT instance, channel, ts, status FROM inbox")}
    missing, unfinished = [], []
    for channel in (soak.room, soak.outside):
        for msg in soak.emu.all_messages(channel):
            author = by_user.get(msg.get("user", ""))
            for name in BOTS:
                if name == author:
                    continue
                status = inbox.get((name, channel, msg["ts"]))
                if status is None:
                    missing.append((name, channel, msg["ts"], msg.get("text", "")[:40]))
                elif status not in ("done", "dropped"):
                    unfinished.append((name, msg["ts"], status))
    assert not missing, f"{len(missing)} deliveries never reached an inbox, e.g. {missing[:3]}"
    assert not unfinished, f"{len(unfinished)} inbox rows not finished, e.g. {unfinished[:3]}"


def _check_one_turn_per_message(soak: Soak) -> None:
    rows = soak.sql("SELECT instance, channel, ts, status FROM messages WHERE channel = ?", soak.room)
    status = {(r[0], r[2]): r[3] for r in rows}
    consumed = Counter(
        (r[0], r[2])
        for r in soak.sql("SELECT instance, channel, ts FROM soak_consumed WHERE channel = ?", soak.room)
    )
    for ts, mentioned in soak.human_posts:
        for name in mentioned:
            assert status.get((name, ts)) == "done", (
                f"{name} never answered alice's {ts}: {status.get((name, ts))}"
            )
    woke = [key for key, s in status.items() if s in ("pending", "done")]
    assert all(status[key] == "done" for key in woke), "a message is still waiting for its turn"
    wrong = {key: consumed[key] for key in woke if consumed[key] != 1}
    assert not wrong, (
        f"{len(wrong)} messages were answered by {set(wrong.values())} recorded turns, e.g. {list(wrong)[:3]}"
    )
    assert not set(consumed) - set(woke), "a turn consumed a message that never woke an agent"
    recorded = soak.scalar(
        "SELECT coalesce(sum(messages), 0) FROM turns WHERE status IN ('done', 'silent', 'failed')"
    )
    everywhere = soak.scalar("SELECT count(*) FROM soak_consumed")
    assert recorded == everywhere, (
        f"recorded turns answered {recorded} messages, the store closed {everywhere}"
    )
    bots = soak.scalar(
        "SELECT count(*) FROM messages WHERE channel = ? AND status = 'done'"
        " AND sender_id LIKE 'slack:bot:%'",
        soak.room,
    )
    assert bots, "no bot message ever woke an agent: the soak did not exercise A2A turns"
    failed = soak.sql("SELECT id, error FROM turns WHERE status = 'failed'")
    assert not failed, f"turns failed: {failed[:3]}"


def _check_every_answered_message_was_shown(soak: Soak) -> None:
    """A message a turn consumed was in the prompt of one of its instance's agent runs: a
    mention marked ``done`` that no prompt ever held was lost, however its status reads.
    Each message is known by its own words: alice's ``task N``, a bot's item (its prompt's hash)."""
    named = {msg["ts"]: _words(msg.get("text", "")) for msg in soak.emu.all_messages(soak.room)}
    seen: dict[str, set[str]] = {name: set() for name in BOTS}
    for run in _agent_turns(soak):
        if run["channel"] == soak.room:
            seen[run["instance"]].update(WORDS.findall(run["prompt"]))
    answered = soak.sql("SELECT instance, ts FROM messages WHERE channel = ? AND status = 'done'", soak.room)
    unseen = [(name, ts, named[ts]) for name, ts in answered if named.get(ts) and named[ts] not in seen[name]]
    assert not unseen, f"{len(unseen)} answered messages were never shown to their agent, e.g. {unseen[:3]}"


WORDS = re.compile(r"task \d+: your view\?|item [0-9a-f]{12}")


def _words(text: str) -> str:
    found = WORDS.search(text)
    return found.group(0) if found else ""


def _check_replies_posted_once(soak: Soak) -> None:
    keys: Counter[str] = Counter()
    for channel in (soak.room, soak.outside):
        for msg in soak.emu.all_messages(channel):
            key = ((msg.get("metadata") or {}).get("event_payload") or {}).get("nanoslack_key")
            if key:
                keys[key] += 1
    twice = sorted(k for k, n in keys.items() if n > 1)
    assert not twice, f"{len(twice)} posts were made twice, e.g. {twice[:3]}"
    sent = {str(r[0]) for r in soak.sql("SELECT dedupe_key FROM outbox WHERE status = 'sent'")}
    not_sent = soak.sql("SELECT dedupe_key, status, error FROM outbox WHERE status != 'sent'")
    assert not not_sent, f"outbox rows never sent: {not_sent[:3]}"
    assert sent == set(keys), "the outbox and Slack disagree on what was posted"
    enqueued = Counter(str(r[0]) for r in soak.sql("SELECT dedupe_key FROM soak_enqueued"))
    assert all(n == 1 for n in enqueued.values())
    assert any(k.startswith("turn:") for k in sent), "no agent ever replied"


def _check_other_room_never_reached_an_agent(soak: Soak) -> None:
    assert soak.outside_posts, "the soak posted nothing in the other room"
    turns = [t for t in _agent_turns(soak) if t["channel"] == soak.outside]
    assert not turns, f"an agent ran on the other room: {turns[:1]}"
    assert not soak.sql("SELECT instance, ts FROM messages WHERE channel = ?", soak.outside)
    reasons = Counter(str(r[0]) for r in soak.sql("SELECT reason FROM inbox WHERE channel = ?", soak.outside))
    assert set(reasons) == {"room not in SLACK_A2A_ROOMS"}, reasons
    assert sum(reasons.values()) == 2 * len(soak.outside_posts)


def _check_hop_limit(soak: Soak) -> None:
    held = soak.sql("SELECT instance, max(held) FROM soak_hops GROUP BY instance")
    assert held, "no bot message was ever admitted"
    over = [(i, n) for i, n in held if n > MAX_HOPS]
    assert not over, f"admitted beyond SLACK_A2A_MAX_HOPS={MAX_HOPS}: {over}"
    assert soak.scalar("SELECT max(hop) FROM messages WHERE channel = ?", soak.room) <= MAX_HOPS
    limited = soak.scalar("SELECT count(*) FROM inbox WHERE reason = 'hop limit reached'")
    assert limited, "the hop limit was never reached: the check above proved nothing"


def _check_no_token_in_logs(soak: Soak) -> None:
    tokens = [t for a in soak.apps.values() for t in (a.bot_token, a.app_token)]
    lines = 0
    for run in soak.runs:  # each run's stdout and stderr
        log = run.log_file.name
        for line in run.output.splitlines():
            lines += 1
            assert not any(t in line for t in tokens), f"a token in {log}: {line[:200]}"
            assert not TOKEN_SHAPE.search(line), f"a token-shaped string in {log}: {line[:200]}"
    debug = sum(run.output.count('"level": "debug"') for run in soak.runs)
    assert lines and debug, "the logs are empty or not at debug level: the check proved nothing"


def _report(soak: Soak) -> None:
    turns = Counter(str(r[0]) for r in soak.sql("SELECT status FROM turns"))
    hop_drops = soak.scalar("SELECT count(*) FROM inbox WHERE reason = 'hop limit reached'")
    # Turns that answered only messages recorded late (older than an earlier turn of their
    # thread had answered through): how often the soak met that window.
    late = soak.scalar(
        "SELECT count(*) FROM turns t WHERE t.status IN ('done', 'silent') AND EXISTS (SELECT 1 FROM turns e"
        " WHERE e.instance = t.instance AND e.channel = t.channel AND e.thread_key = t.thread_key"
        " AND e.id < t.id AND e.status IN ('done', 'silent') AND e.through_ts > t.through_ts)"
    )
    print(
        f"soak: seed={soak.plan.seed} human={len(soak.human_posts)} outside={len(soak.outside_posts)}"
        f" kills={soak.kills} room_messages={len(soak.emu.all_messages(soak.room))}"
        f" turns={dict(turns)} agent_runs={len(_agent_turns(soak))}"
        f" hop_drops={hop_drops} late_turns={late}"
        f" redelivered={soak.emu.stats().redelivered} faults={dict(soak.faults)}"
        f" recovered={ {name: _logged(soak, name) for name in RECOVERIES} }"
    )


RECOVERIES = (
    "inbox resumed",
    "turns abandoned by a previous run",
    "post recovered: already posted",
    "post recovered: not found, resending",
)


def _logged(soak: Soak, event: str) -> int:
    """How many log lines of all runs name ``event`` (what the kills left to recover)."""
    return sum(len(run.events(event)) for run in soak.runs)


# -- the tests ---------------------------------------------------------------------------------


def _seed() -> int:
    given = os.environ.get("NANOSLACK_SOAK_SEED")
    return int(given) if given else random.SystemRandom().randrange(1 << 32)


@pytest.fixture
def soak_seed() -> Iterator[int]:
    seed = _seed()
    yield seed
    print(f"soak seed: {seed} (replay with NANOSLACK_SOAK_SEED={seed})")


async def test_soak_short(tmp_path: Path, soak_seed: int) -> None:
    """150 human messages, faults throughout, two SIGKILLs: the reliability contract holds."""
    await _soak(tmp_path, Plan(messages=150, kills=2, seed=soak_seed))


@pytest.mark.soak
@pytest.mark.timeout(3 * 3600)
@pytest.mark.skipif(
    os.environ.get("NANOSLACK_SOAK") != "1", reason="long soak: set NANOSLACK_SOAK=1 to run it"
)
async def test_soak_long(tmp_path: Path, soak_seed: int) -> None:
    """2,000 human messages, faults throughout, a SIGKILL every ~100 messages
    (``NANOSLACK_SOAK_MESSAGES`` and ``NANOSLACK_SOAK_KILLS`` size it otherwise)."""
    messages = int(os.environ.get("NANOSLACK_SOAK_MESSAGES", "2000"))
    kills = int(os.environ.get("NANOSLACK_SOAK_KILLS", str(messages // 100)))
    await _soak(tmp_path, Plan(messages=messages, kills=kills, seed=soak_seed))
