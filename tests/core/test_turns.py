"""The turn stage (docs/agents.md) on a real SQLite store with real agents, and the
``nanoslack turns`` operator command.

Messages reach the store the way the pipeline puts them there (router, then gate);
the agent is the real ``command`` back end running a scripted program
(``tests/e2e/turn_agent.py``), or the real OpenAI back end for the budget refusal.
"""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import httpx2
import pytest

from nanoslack.agents import Agent, OpenAIAgent, TokenLedger, load_teammate
from nanoslack.agents.command import CommandAgent
from nanoslack.agents.prompt import NEW_SINCE
from nanoslack.agents.tool import Tool
from nanoslack.budgets import StoreLedger
from nanoslack.core import build_turns
from nanoslack.features import RoomFeature
from nanoslack.gate import Gate
from nanoslack.halts import Halts
from nanoslack.inbound import Identity, Inbound, ThreadKey
from nanoslack.ops import admin
from nanoslack.router import Router
from nanoslack.services import Services, TurnOptions
from nanoslack.store import Store
from nanoslack.store.errors import StoreUnavailable
from nanoslack.tools.toolbox import ToolFamily
from nanoslack.turns import BUDGET_TEXT, TurnScheduler
from nanoslack.turns import scheduler as scheduler_module
from nanoslack.turns.transcript import MAX_CHARS, MAX_MESSAGES, Transcripts
from tests.core.core_helpers import BOT_USER, INSTANCE, OWNER, ROOM, bot_message, message, next_ts
from tests.e2e.turn_agent import TurnAgent

ELI_USER = "U0ELIBOT"
ELI = "slack:bot:B0ELI"


class Directory:
    """The room as the Slack edge would describe it (``turns.RoomDirectory``)."""

    def __init__(self) -> None:
        self.names = {BOT_USER: "dana", ELI_USER: "eli", OWNER: "alice"}

    async def member_names(self, channel: str) -> tuple[str, ...]:
        return tuple(self.names.values())

    def name_of_user(self, slack_user_id: str) -> str | None:
        return self.names.get(slack_user_id)


@pytest.fixture
def program(tmp_path: Path) -> TurnAgent:
    return TurnAgent.install(tmp_path)


@pytest.fixture(autouse=True)
def _names(store: Store) -> None:
    store.users.ensure(f"slack:{OWNER}", kind="human", display_name="alice", slack_user_id=OWNER)
    store.users.ensure(ELI, kind="bot", display_name="eli")


def dispatcher(
    store: Store,
    agent: Agent,
    tmp_path: Path,
    *,
    ledger: TokenLedger | None = None,
    daily_tokens: int | None = None,
    features: Sequence[RoomFeature] = (),
) -> TurnScheduler:
    services = Services(
        store=store,
        teammates_dir=tmp_path / "teammates",
        siblings=lambda: {"dana": BOT_USER, "eli": ELI_USER},
        limiter=asyncio.Semaphore(2),
        turns=TurnOptions(poll_interval=0.05),
        ledger=ledger,
        daily_tokens=lambda _instance: daily_tokens,
    )
    return build_turns(
        Identity(INSTANCE, "T0TEAM", BOT_USER, "B0DANA", "dana"),
        agent,
        services,
        directory=Directory(),
        halts=Halts(store),
        features=features,
    )


@pytest.fixture
async def turns(store: Store, program: TurnAgent, tmp_path: Path) -> AsyncIterator[TurnScheduler]:
    """The dispatcher running the command agent, as an instance runs it."""
    d = dispatcher(store, CommandAgent(program.command, timeout=30, instance=INSTANCE), tmp_path)
    d.recover()
    task = asyncio.create_task(d.run())
    yield d
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def deliver(store: Store, router: Router, gate: Gate, msg: Inbound) -> Inbound:
    """What the pipeline does with an admitted message: route it, judge it if engaged."""
    with store.transaction():
        route = router.route(msg)
        if route.engaged:
            gate.judge(msg, route)
    return msg


class Wakes(Protocol):
    def wake(self) -> None: ...


async def settle(store: Store, turns: Wakes, *, turns_done: int) -> None:
    """Wait (bounded) until ``turns_done`` turns are recorded and nothing waits for one."""
    turns.wake()
    deadline = time.monotonic() + 15
    while True:
        rows = store.turns.recent(instance=INSTANCE, limit=100)
        finished = [t for t in rows if t.status != "running"]
        if (
            len(finished) >= turns_done
            and not store.messages.pending(INSTANCE)
            and len(rows) == len(finished)
        ):
            return
        assert time.monotonic() < deadline, f"turns did not settle: {rows}"
        await asyncio.sleep(0.02)


def dana_transcripts(store: Store, tmp_path: Path) -> Transcripts:
    """What builds dana's prompts, outside a running scheduler."""
    return Transcripts(
        identity=Identity(INSTANCE, "T0TEAM", BOT_USER, "B0DANA", "dana"),
        store=store,
        teammate=load_teammate(tmp_path / "teammates", INSTANCE),
        skills_dir=tmp_path / "teammates" / "_skills",
        directory=Directory(),
    )


def turn_posts(store: Store) -> list[tuple[str, str]]:
    """(dedupe key, text) of every turn post ever enqueued, whatever became of it."""
    keys = (f"turn:{t.instance}:{t.id}:{i}" for t in reversed(store.turns.recent()) for i in range(3))
    return [(row.dedupe_key, row.text) for row in map(store.outbox.get_by_key, keys) if row is not None]


@pytest.fixture
def db_ref(request: pytest.FixtureRequest) -> str:
    """The store as an operator names it with ``--db``, whichever database the suite's
    ``store`` fixture runs on (``db_arg`` where the suite runs several, else the file)."""
    try:
        return str(request.getfixturevalue("db_arg"))
    except pytest.FixtureLookupError:
        return str(request.getfixturevalue("db_path"))


def thread(parent: Inbound, **kw: object) -> Inbound:
    """A message in the thread under ``parent``."""
    return message(thread_ts=parent.ts, **kw)  # type: ignore[arg-type]


# -- what the agent is shown -------------------------------------------------------------------


async def test_held_and_refused_messages_never_appear_in_a_prompt(
    store: Store, router: Router, gate: Gate, program: TurnAgent, turns: TurnScheduler
) -> None:
    parent = deliver(store, router, gate, message(user=OWNER, mention=True, text="owner question"))
    refused = deliver(
        store, router, gate, bot_message(mention=True, thread_ts=parent.ts, text="refused words")
    )
    [request] = store.approvals.pending()
    gate.decide(request.id, allow=False, by_user=OWNER)
    held = deliver(
        store,
        router,
        gate,
        bot_message("B0FAY", user="U0FAYBOT", mention=True, thread_ts=parent.ts, text="held words"),
    )
    assert store.messages.get(refused.key).status == "refused"  # type: ignore[union-attr]
    assert store.messages.get(held.key).status == "held"  # type: ignore[union-attr]

    await settle(store, turns, turns_done=1)
    [call] = program.calls()
    assert "alice: @dana owner question" in call["stdin"]
    assert "refused words" not in call["stdin"] and "held words" not in call["stdin"]


async def test_room_context_before_the_mention_is_shown_oldest_first(
    store: Store, router: Router, gate: Gate, program: TurnAgent, turns: TurnScheduler
) -> None:
    parent = deliver(store, router, gate, message(user=OWNER, text="context: the build is red"))
    deliver(store, router, gate, thread(parent, user=OWNER, mention=True, text="can you look?"))
    await settle(store, turns, turns_done=1)
    [call] = program.calls()
    lines = call["stdin"].splitlines()
    assert lines[1:4] == [
        "alice: context: the build is red",
        "alice: @dana can you look?",
        "It's your turn, dana.",
    ]
    assert lines[0].startswith("[Group chat - with ") and "eli" in lines[0]
    assert call["thread_ts"] == parent.ts and call["sender"] == f"slack:{OWNER}"


@pytest.mark.parametrize("sent", [True, False], ids=["sent", "still-in-the-outbox"])
async def test_the_next_turn_sees_its_earlier_turn_and_own_posts_then_the_thread_since(
    store: Store, router: Router, gate: Gate, program: TurnAgent, turns: TurnScheduler, sent: bool
) -> None:
    program.reply("dana", "reply {turn}")
    parent = deliver(store, router, gate, message(user=OWNER, mention=True, text="first ask"))
    await settle(store, turns, turns_done=1)
    if sent:  # what the poster does once Slack took the post
        [row] = store.outbox.queued(INSTANCE)
        store.outbox.mark_sent(row.id, ROOM, next_ts())
    deliver(store, router, gate, thread(parent, user=OWNER, mention=True, text="second ask"))
    await settle(store, turns, turns_done=2)

    earlier, new = program.calls()[1]["stdin"].split(NEW_SINCE + "\n")
    # Its earlier turn, as it was shown and what it posted (sent or still in the outbox),
    # then only what is new: the posts are not shown twice.
    assert earlier.splitlines()[1:4] == ["alice: @dana first ask", "It's your turn, dana.", "dana: reply 1"]
    assert new.splitlines()[1:] == ["alice: @dana second ask", "It's your turn, dana."]


async def test_a_reply_is_linked_capped_at_three_posts_and_sent_to_the_thread(
    store: Store, router: Router, gate: Gate, program: TurnAgent, turns: TurnScheduler
) -> None:
    program.reply("dana", "ask @eli\n---\ntwo\n---\nthree\n---\nfour\n---\nfive")
    parent = deliver(store, router, gate, message(user=OWNER, mention=True))
    await settle(store, turns, turns_done=1)
    rows = store.outbox.queued(INSTANCE)
    assert [r.text for r in rows] == [f"ask <@{ELI_USER}>", "two", "three"]
    assert {(r.channel, r.thread_ts) for r in rows} == {(ROOM, parent.ts)}
    [turn] = store.turns.recent()
    assert (turn.status, turn.posts, turn.messages) == ("done", 3, 1)


async def test_silence_posts_nothing_and_closes_the_messages(
    store: Store, router: Router, gate: Gate, program: TurnAgent, turns: TurnScheduler
) -> None:
    msg = deliver(store, router, gate, message(user=OWNER, mention=True))
    await settle(store, turns, turns_done=1)
    assert store.outbox.queued(INSTANCE) == []
    assert [t.status for t in store.turns.recent()] == ["silent"]
    assert store.messages.get(msg.key).status == "done"  # type: ignore[union-attr]


async def test_a_message_made_pending_elsewhere_gets_its_turn_while_other_threads_keep_waking_the_turns(
    store: Store, router: Router, gate: Gate, program: TurnAgent, turns: TurnScheduler
) -> None:
    """A wake names its thread (an allowed message), and then only that thread is looked
    at: what became pending without one (approved with SQL, another process) is still
    found by the look at every thread, at least once a poll interval, however often the
    named wakes come (here: a halted room's thread, pending and never started)."""
    halted = deliver(store, router, gate, message(user=OWNER, mention=True, channel="C0HALTED"))
    store.room_halts.halt("C0HALTED", by=OWNER, instance=None)
    first = deliver(store, router, gate, message(user=OWNER, mention=True))
    turns.wake_thread(ROOM, first.thread_key or "")
    await settle_status(store, first, "done")  # the start's look at everything is over

    async def named_wakes_keep_coming() -> None:
        while True:
            turns.wake_thread("C0HALTED", halted.thread_key or "")
            await asyncio.sleep(0.005)

    waking = asyncio.create_task(named_wakes_keep_coming())
    try:
        msg = deliver(store, router, gate, message(user=OWNER, mention=True))  # no wake of its own
        await settle_status(store, msg, "done")
    finally:
        waking.cancel()
    assert [t.status for t in store.turns.recent()] == ["silent", "silent"]
    assert store.messages.get(halted.key).status == "pending"  # type: ignore[union-attr]


async def settle_status(store: Store, msg: Inbound, status: str) -> None:
    deadline = time.monotonic() + 10
    while store.messages.get(msg.key).status != status:  # type: ignore[union-attr]
        assert time.monotonic() < deadline, f"{msg.ts} never became {status}"
        await asyncio.sleep(0.02)


async def test_a_turn_the_store_failed_before_its_agent_ran_is_one_turn_when_it_runs_again(
    store: Store,
    router: Router,
    gate: Gate,
    program: TurnAgent,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The store goes away after the turn's row is written, while the turn reads what its
    tools need (a feature's tools read the store: a room's lead, its notes): the turn
    crashes, its message stays pending and runs again; that run is the same turn, not a
    second row beside one left ``running`` for good."""
    monkeypatch.setattr(scheduler_module, "CRASH_BACKOFF_S", 0.05)
    failures = [StoreUnavailable("connection lost: the server closed the connection")]

    class ToolsReadTheStore(RoomFeature):
        def toolsets(self) -> Sequence[ToolFamily]:
            def tools(*_: object) -> Sequence[Tool[Any]]:
                if failures:
                    raise failures.pop()
                return ()

            return (tools,)

    program.reply("dana", "an answer")
    d = dispatcher(
        store,
        CommandAgent(program.command, timeout=30, instance=INSTANCE),
        tmp_path,
        features=[ToolsReadTheStore()],
    )
    task = asyncio.create_task(d.run())
    try:
        parent = deliver(store, router, gate, message(user=OWNER, mention=True))
        await settle(store, d, turns_done=1)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert not failures, "the store never failed: the test tested nothing"
    [turn] = store.turns.recent()
    assert (turn.status, turn.posts, turn.through_ts) == ("done", 1, parent.ts)
    assert [r.text for r in store.outbox.queued(INSTANCE)] == ["an answer"]


async def test_a_failed_turn_posts_nothing_and_consumes_its_messages(
    store: Store, router: Router, gate: Gate, program: TurnAgent, turns: TurnScheduler
) -> None:
    program.reply("dana", "an answer")
    program.fail("dana")
    parent = deliver(store, router, gate, message(user=OWNER, mention=True, text="doomed"))
    await settle(store, turns, turns_done=1)
    [failed] = store.turns.recent()
    assert failed.status == "failed" and "exited with 3" in (failed.error or "")
    assert turn_posts(store) == []
    assert store.messages.get(parent.key).status == "done"  # type: ignore[union-attr]

    # Not retried on every poll; the next message is a fresh turn that starts after it.
    (program.folder / "dana.fail").unlink()
    deliver(store, router, gate, thread(parent, user=OWNER, mention=True, text="try again"))
    await settle(store, turns, turns_done=2)
    assert len(program.calls()) == 2
    # What the failed turn was shown stays in the thread's history, not in the new part.
    earlier, new = program.calls()[1]["stdin"].split(NEW_SINCE + "\n")
    assert "doomed" in earlier and "doomed" not in new
    assert turn_posts(store) == [(f"turn:{INSTANCE}:2:0", "an answer")]


async def test_a_spent_daily_budget_tells_the_thread_once_per_day(
    store: Store, router: Router, gate: Gate, tmp_path: Path
) -> None:
    store.turns.add_usage(INSTANCE, 100)
    async with httpx2.AsyncClient() as http:
        # Refused before any request: the base URL is a closed port.
        agent = OpenAIAgent(http, base_url="http://127.0.0.1:9/v1", model="m", instance=INSTANCE)
        d = dispatcher(store, agent, tmp_path, ledger=StoreLedger(store), daily_tokens=100)
        task = asyncio.create_task(d.run())
        try:
            parent = deliver(store, router, gate, message(user=OWNER, mention=True))
            await settle(store, d, turns_done=1)
            deliver(store, router, gate, thread(parent, user=OWNER, mention=True, text="hello?"))
            await settle(store, d, turns_done=2)
            other = deliver(store, router, gate, message(user=OWNER, mention=True, text="new thread"))
            await settle(store, d, turns_done=3)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert [t.status for t in store.turns.recent()] == ["budget"] * 3
    notices = [(r.thread_ts, r.text) for r in store.outbox.queued(INSTANCE)]
    assert notices == [(parent.ts, BUDGET_TEXT), (other.ts, BUDGET_TEXT)]


async def test_the_rooms_mission_is_under_the_header_of_every_turn_there(
    store: Store, router: Router, gate: Gate, program: TurnAgent, turns: TurnScheduler
) -> None:
    store.room_kinds.set(ROOM, kind="mention", mission="Ship the parser by Friday")
    deliver(store, router, gate, message(user=OWNER, mention=True, text="where are we?"))
    await settle(store, turns, turns_done=1)
    (call,) = program.calls()
    assert call["stdin"].splitlines()[1] == "Mission: Ship the parser by Friday"


async def test_a_thread_of_pasted_logs_is_shown_newest_first_within_the_transcript_bound(
    store: Store, router: Router, gate: Gate, program: TurnAgent, turns: TurnScheduler
) -> None:
    parent = deliver(store, router, gate, message(user=OWNER, text="logs incoming"))
    for i in range(4):  # room context: 4 × 10,000 characters, more than a transcript holds
        deliver(store, router, gate, thread(parent, user=OWNER, text=f"LOG{i} " + "x" * 10_000))
    deliver(store, router, gate, thread(parent, user=OWNER, mention=True, text="what went wrong?"))
    await settle(store, turns, turns_done=1)

    (call,) = program.calls()
    prompt = call["stdin"]
    assert len(prompt) <= MAX_CHARS + 1_000  # the header and the closing lines on top
    assert "… 3 earlier messages not shown" in prompt
    assert "LOG3" in prompt and "LOG2" in prompt and "LOG1" not in prompt
    assert prompt.index("LOG3") < prompt.index("what went wrong?")


async def test_a_thread_longer_than_the_transcript_bound_shows_its_newest_messages_and_counts_the_rest(
    store: Store, router: Router, gate: Gate, program: TurnAgent, turns: TurnScheduler
) -> None:
    parent = deliver(store, router, gate, message(user=OWNER, text="ctx000"))
    extra = 30  # room context past the bound, short lines: the character bound is far
    for i in range(1, MAX_MESSAGES + extra):
        deliver(store, router, gate, thread(parent, user=OWNER, text=f"ctx{i:03d}"))
    deliver(store, router, gate, thread(parent, user=OWNER, mention=True, text="sum it up"))
    await settle(store, turns, turns_done=1)

    (call,) = program.calls()
    shown = [line for line in call["stdin"].splitlines() if line.startswith("alice: ")]
    assert len(shown) == MAX_MESSAGES
    assert shown[0] == f"alice: ctx{extra + 1:03d}" and shown[-1] == "alice: @dana sum it up"
    assert f"… {extra + 1} earlier messages not shown" in call["stdin"]


async def test_a_turn_abandoned_while_its_agent_ran_records_nothing_and_its_messages_are_answered_once(
    store: Store, router: Router, gate: Gate, program: TurnAgent, turns: TurnScheduler
) -> None:
    """A restart or a lease takeover marks a running turn ``abandoned`` and runs its
    messages again: the abandoned turn, when its agent returns, must not record its
    posts (or its handoffs, or close its messages), or the thread is answered twice."""
    program.reply("dana", "answer {turn}")
    program.hold("dana")
    deliver(store, router, gate, message(user=OWNER, mention=True, text="one question"))
    deadline = time.monotonic() + 15
    while not program.calls("dana"):
        assert time.monotonic() < deadline, "the agent never ran"
        await asyncio.sleep(0.02)
    assert store.turns.abandon_running(INSTANCE) == 1  # what the new holder's start does
    program.release("dana")
    await settle(store, turns, turns_done=1)

    assert [(t.status, t.posts) for t in reversed(store.turns.recent())] == [("abandoned", 0), ("done", 1)]
    second = store.turns.recent()[0].id
    assert turn_posts(store) == [(f"turn:{INSTANCE}:{second}:0", "answer 2")]


async def test_a_turn_shows_the_thread_only_up_to_the_newest_message_it_answers(
    store: Store, router: Router, gate: Gate, tmp_path: Path
) -> None:
    """What a turn shows is what it consumes: a message recorded after the turn read
    the ones it answers is left to the next turn, not shown to this one (it would be
    answered without being consumed, then answered again)."""
    first = deliver(store, router, gate, message(user=OWNER, mention=True, text="first ask"))
    deliver(store, router, gate, thread(first, user=OWNER, mention=True, text="arrived later"))
    pending = store.messages.pending(INSTANCE)
    assert len(pending) == 2
    transcripts = dana_transcripts(store, tmp_path)
    key = ThreadKey(pending[0].channel, pending[0].thread_key)
    turn, _recall = await transcripts.build(key, pending[:1])
    assert [line.text for line in turn.transcript] == ["@dana first ask"]
    assert turn.earlier_not_shown == 0


async def test_a_mention_recorded_after_a_later_message_of_its_thread_was_answered_is_shown_to_its_turn(
    store: Store, router: Router, gate: Gate, program: TurnAgent, turns: TurnScheduler
) -> None:
    """Slack redelivers an event the fleet never recorded (a dropped socket, a kill before
    the inbox commit) after later events went through: a mention can become pending after
    a turn already answered a later message of its thread. The next turn answers it (it is
    consumed); it must also show it, though it is older than that turn's ``through_ts``
    (docs/architecture.md "Replies exactly once")."""
    parent = deliver(store, router, gate, message(user=OWNER, text="context: the build is red"))
    asked_first, asked_second = next_ts(), next_ts()
    deliver(store, router, gate, thread(parent, user=OWNER, mention=True, text="second ask", ts=asked_second))
    await settle(store, turns, turns_done=1)
    late = deliver(
        store, router, gate, thread(parent, user=OWNER, mention=True, text="first ask", ts=asked_first)
    )
    assert store.messages.get(late.key).status == "pending"  # type: ignore[union-attr]
    await settle(store, turns, turns_done=2)

    first, second = program.calls()
    assert "alice: @dana second ask" in first["stdin"] and "first ask" not in first["stdin"]
    assert "alice: @dana first ask" in second["stdin"]
    assert store.messages.get(late.key).status == "done"  # type: ignore[union-attr]


async def test_a_long_thread_counts_as_not_shown_only_what_came_before_the_messages_a_turn_answers(
    store: Store, router: Router, gate: Gate, tmp_path: Path
) -> None:
    """Past the transcript bound the prompt says how many earlier messages it leaves
    out: a message that arrived after the newest one the turn answers is the next
    turn's, neither shown nor counted as left out."""
    parent = deliver(store, router, gate, message(user=OWNER, text="ctx000"))
    extra = 30
    for i in range(1, MAX_MESSAGES + extra):
        deliver(store, router, gate, thread(parent, user=OWNER, text=f"ctx{i:03d}"))
    ask = deliver(store, router, gate, thread(parent, user=OWNER, mention=True, text="sum it up"))
    deliver(store, router, gate, thread(parent, user=OWNER, mention=True, text="arrived later"))
    answered = [m for m in store.messages.pending(INSTANCE) if float(m.ts) <= float(ask.ts)]
    assert answered and answered[-1].ts == ask.ts
    transcripts = dana_transcripts(store, tmp_path)
    turn, _recall = await transcripts.build(ThreadKey(answered[0].channel, answered[0].thread_key), answered)
    assert len(turn.transcript) == MAX_MESSAGES and turn.transcript[-1].text == "@dana sum it up"
    assert turn.earlier_not_shown == extra + 1


# -- nanoslack turns ---------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _no_env_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # no stray .env


def run_cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = admin.turns_main(list(argv), out=out)
    return code, out.getvalue()


@pytest.fixture
def recorded(store: Store) -> Iterator[None]:
    """Three turns: dana done with 2 posts, eli failed, dana running."""
    done = store.turns.start(
        instance="dana", channel=ROOM, thread_key="1.1", reply_thread_ts="1.1", sender_id="slack:U0A",
        through_ts="1.1", messages=2, wrapping_up=False,
    )  # fmt: skip
    store.turns.add_tokens(done, 345)
    store.turns.finish(done, "done", posts=2)
    failed = store.turns.start(
        instance="eli", channel=ROOM, thread_key="", reply_thread_ts="", sender_id="slack:U0A",
        through_ts="1.2", messages=1, wrapping_up=False,
    )  # fmt: skip
    store.turns.finish(failed, "failed", error="agent command exited with 1:\n  boom " + "x" * 100)
    store.turns.start(
        instance="dana", channel=ROOM, thread_key="1.3", reply_thread_ts="1.3", sender_id="slack:U0A",
        through_ts="1.3", messages=1, wrapping_up=True,
    )  # fmt: skip
    yield


def test_turns_lists_recent_turns_newest_first(recorded: None, db_ref: str) -> None:
    code, out = run_cli("--db", db_ref)
    header, *rows = out.splitlines()
    assert code == 0
    assert header.split() == [
        "ID", "INSTANCE", "CHANNEL", "THREAD", "STATUS", "MSGS", "POSTS", "TOKENS", "FEEDBACK", "STARTED",
        "ERROR",
    ]  # fmt: skip
    assert [r.split()[:8] for r in rows] == [
        ["3", "dana", ROOM, "1.3", "running", "1", "0", "0"],
        ["2", "eli", ROOM, "(dm)", "failed", "1", "0", "0"],
        ["1", "dana", ROOM, "1.1", "done", "2", "2", "345"],
    ]
    # The error fits on its line, shortened.
    assert "agent command exited with 1: boom xxx" in rows[1] and rows[1].endswith("…")


def test_turns_shows_the_feedback_peoples_clicks_gave_each_reply(
    recorded: None, db_ref: str, store: Store
) -> None:
    assert store.feedback.record("dana", 1, "U0A", "negative")
    assert store.feedback.record("dana", 1, "U0A", "positive")  # a second click replaces the first
    assert store.feedback.record("dana", 1, "U0B", "positive")
    assert store.feedback.record("dana", 1, "U0C", "negative")
    assert not store.feedback.record("eli", 1, "U0A", "positive")  # not eli's turn
    _, out = run_cli("--db", db_ref)
    [done] = [r for r in out.splitlines() if r.split()[0] == "1"]
    assert done.split()[8:10] == ["+2", "-1"]


def test_turns_filters_by_instance_and_limits(
    recorded: None, db_ref: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLACK_INSTANCES", "dana,eli,fay")
    _, out = run_cli("--db", db_ref, "--instance", "dana", "--limit", "1")
    assert [r.split()[0] for r in out.splitlines()[1:]] == ["3"]
    _, out = run_cli("--db", db_ref, "--instance", "fay")
    assert out.strip() == "no turns yet"


def test_turns_rejects_a_limit_below_one(db_ref: str, store: Store) -> None:
    code, _ = run_cli("--db", db_ref, "--limit", "0")
    assert code == 2


def test_turns_is_a_nanoslack_command(
    recorded: None, db_ref: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from nanoslack.cli import main

    assert main(["turns", "--db", db_ref, "--limit", "2"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    assert main(["--help"]) == 0
    assert "  turns " in capsys.readouterr().out


async def test_soul_and_agents_edits_apply_from_the_next_turn_and_a_broken_front_matter_is_logged_once(
    store: Store, router: Router, gate: Gate, tmp_path: Path
) -> None:
    from structlog.testing import capture_logs

    from nanoslack.agents.teammates import TeammateSource

    folder = tmp_path / "teammates" / INSTANCE
    folder.mkdir(parents=True)
    (folder / "SOUL.md").write_text("---\nrole: planner\n---\nYou are Dana.\n")
    transcripts = Transcripts(
        identity=Identity(INSTANCE, "T0TEAM", BOT_USER, "B0DANA", "dana"),
        store=store,
        teammate=TeammateSource(tmp_path / "teammates", INSTANCE),
        skills_dir=tmp_path / "teammates" / "_skills",
        directory=Directory(),
    )
    deliver(store, router, gate, message(user=OWNER, mention=True, text="plan?"))
    pending = store.messages.pending(INSTANCE)
    key = ThreadKey(pending[0].channel, pending[0].thread_key)

    async def system() -> str:
        turn, _ = await transcripts.build(key, pending)
        return turn.system

    assert "You are Dana." in await system()
    (folder / "SOUL.md").write_text("---\nrole: planner\nYou are Dana, who plans on Fridays.\n")
    (folder / "AGENTS.md").write_text("Always answer in haiku.\n")
    with capture_logs() as logs:
        first, second = await system(), await system()
    for prompt in (first, second):
        assert "You are Dana, who plans on Fridays." in prompt and "Always answer in haiku." in prompt
        assert "---" not in prompt and "role:" not in prompt
    [logged] = [e for e in logs if e["event"] == "teammate file malformed"]
    assert (logged["file"], logged["line"]) == (str(folder / "SOUL.md"), 1)
