"""Team rooms in the store (docs/team-rooms.md), on SQLite and PostgreSQL: the team tools' checks,
what a turn's reports and ballots leave behind, and the clock's claims: processes that
look at once (each its own connection, as two fleets sharing a database) still post each
ping, reminder and result once, and a board edited by two at once ends up listing both.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from nanoslack.agents import Turn
from nanoslack.agents.tool import call_tool
from nanoslack.config.team import TeamSettings
from nanoslack.inbound import FeatureClick, Identity
from nanoslack.store import Store
from nanoslack.team import TeamFeature
from nanoslack.team.board import EMPTY, render
from nanoslack.tools.host import TurnEffects
from nanoslack.tools.team import TeamTools

ROOM = "C0TEAM"
THREAD = "1700000000.000100"
ASK = THREAD
T0 = 1_800_000_000.0
CONTENDERS = 6
SIBLINGS = {"dana": "U0DANA", "eli": "U0ELI", "fay": "U0FAY"}


def turn(channel: str = ROOM, thread_ts: str = THREAD, instance: str = "eli") -> Turn:
    return Turn(
        instance=instance,
        name=instance,
        channel=channel,
        thread_ts=thread_ts,
        sender_id="slack:U0ALICE",
        wrapping_up=False,
        room="Group chat" if thread_ts else "DM",
        members=(),
        transcript=(),
    )


def team(store: Store, instance: str = "eli", **settings: Any) -> TeamFeature:
    identity = Identity(instance, "T0", SIBLINGS[instance], f"B0{instance.upper()}")
    return TeamFeature(store, identity, TeamSettings(**settings))


class Electorate:
    def __init__(self, humans: tuple[str, ...] = ("U0ALICE",), bots: tuple[str, ...] = ()) -> None:
        self.humans, self.bots = humans, bots

    async def room_voters(self, channel: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return self.humans, self.bots


def tools(store: Store, *, instance: str = "eli", thread_ts: str = THREAD) -> TeamTools:
    return TeamTools(
        instance=instance,
        store=store,
        turn=turn(thread_ts=thread_ts, instance=instance),
        msgs=(),
        effects=TurnEffects(),
        voters=Electorate(),
    )


def call(t: TeamTools, name: str, **arguments: Any) -> str:
    result = asyncio.run(call_tool(t.tools(), name, arguments))
    return ("error: " if result.is_error else "") + result.text


def commit(store: Store, t: TeamTools, who: TeamFeature, turn_id: int = 1) -> None:
    with store.transaction():
        who.apply(turn_id, turn(instance=who.instance), t.effects)


# -- the tools' checks -------------------------------------------------------------------------


def test_team_tools_are_offered_in_group_rooms_and_directive_only_in_chain_rooms(store: Store) -> None:
    assert offered(tools(store)) == ["report", "vote", "ballot"]
    assert offered(tools(store, thread_ts="")) == []
    store.room_kinds.set(ROOM, kind="chain", lead="dana", members=("dana", "eli"))
    assert offered(tools(store)) == ["report", "vote", "ballot", "directive"]
    assert all(s.origin == "host" for s in tools(store).tools())  # served over MCP too


def offered(t: TeamTools) -> list[str]:
    return [s.name for s in t.tools() if s.offered]


def test_a_report_is_checked_before_it_is_taken(store: Store) -> None:
    t = tools(store)
    assert call(t, "report", status="busy").startswith("error: not reported: status must be one of working")
    assert call(t, "report", status="working", progress_done=-1) == (
        "error: not done: the arguments do not fit report: progress_done: Input should be greater than or "
        "equal to 0"
    )
    assert call(t, "report", status="working", reply_to="yesterday").startswith(
        "error: not reported: reply_to"
    )
    assert (
        call(t, "report", status="working", reply_to=ASK)
        == "reported (working): the task is on the room's board"
    )
    assert tools(store, thread_ts="") and call(tools(store, thread_ts=""), "report", status="working") == (
        "error: not done: report works in a group conversation, not in a direct message"
    )


def test_a_vote_and_a_ballot_are_checked_before_they_are_taken(store: Store) -> None:
    t = tools(store)
    assert call(t, "vote", question=" ") == "error: no vote: the question is empty"
    assert (
        call(t, "vote", question="Ship?", options=["yes"])
        == "error: no vote: a vote needs at least two options"
    )
    assert (
        call(t, "vote", question="Ship?", options=["yes", "YES"]) == "error: no vote: the options must differ"
    )
    assert call(t, "ballot", choice="yes") == "error: no ballot: there is no open vote in this room"
    assert (
        call(t, "ballot", choice="yes", vote_ts="1.2")
        == "error: no ballot: there is no vote 1.2 in this room"
    )
    assert call(t, "vote", question="Ship?").startswith("vote posted (yes, no)")
    assert call(t, "vote", question="Again?") == "error: no vote: a turn opens one vote at most"
    assert call(t, "ballot", choice="maybe") == "error: no ballot: choose one of yes, no"
    assert call(t, "ballot", choice="No") == "ballot cast: no (voting again replaces it)"


def test_a_directive_outside_a_chain_room_or_from_a_worker_is_refused_with_a_note(store: Store) -> None:
    t = tools(store)
    assert call(t, "directive", to="dana", task="x").startswith(
        "error: refused by the room: directives are for"
    )
    store.room_kinds.set(ROOM, kind="chain", lead="dana", members=("dana", "eli"))
    t = tools(store)
    assert call(t, "directive", to="dana", task="x") == (
        "error: refused by the room: only the lead (dana) gives directives here; report to them instead"
    )
    commit(store, t, team(store))
    (note,) = store.outbox.queued("eli")
    assert (note.purpose, note.thread_ts) == ("notice", THREAD)
    assert note.text == (
        "⛔ The room refused a directive from eli: in this chain room only the lead, dana, gives directives."
    )
    lead = tools(store, instance="dana")
    assert call(lead, "directive", to="fay", task="x") == (
        "error: not sent: fay is not in this room (the room has dana, eli)"
    )
    assert call(lead, "directive", to="@Eli", task="write the parser").startswith("directive posted for eli")
    assert lead.effects.posts == ["📌 Directive for @eli: write the parser"]


# -- what a turn leaves behind -----------------------------------------------------------------


def test_reports_without_reply_to_follow_the_task_they_opened_in_the_thread(store: Store) -> None:
    eli = team(store)
    t = tools(store)
    call(t, "report", status="working", text="the parser", reply_to=ASK, progress_total=3)
    commit(store, t, eli)
    t = tools(store)
    call(t, "report", status="working", progress_done=2, step="tests")
    commit(store, t, eli, 2)
    (task,) = store.tasks.open_in(ROOM)
    assert (task.request_ts, task.text, task.progress_done, task.progress_total, task.step) == (
        ASK,
        "the parser",
        2,
        3,
        "tests",
    )
    board = store.boards.get(ROOM)
    assert board is not None and board.instance == "eli" and "the parser · 2/3 · tests" in board.text
    t = tools(store)
    call(t, "report", status="failed", text="blocked on the schema")
    commit(store, t, eli, 3)
    assert store.tasks.open_in(ROOM) == []
    assert store.boards.get(ROOM).text == EMPTY  # type: ignore[union-attr]
    # One post, then edits of it, each a new outbox row.
    rows = [r for r in store.outbox.queued("eli") if r.dedupe_key.startswith("board:")]
    assert [(r.kind, r.update_of) for r in rows] == [
        ("post", None),
        ("update", "board:C0TEAM"),
        ("update", "board:C0TEAM"),
    ]


def test_a_closing_report_with_no_open_task_makes_no_board(store: Store) -> None:
    t = tools(store)
    call(t, "report", status="completed", reply_to=ASK, text="done already")
    commit(store, t, team(store))
    assert store.boards.get(ROOM) is None and store.outbox.queued("eli") == []


def test_a_vote_waits_for_its_people_and_bots_and_closes_at_once_when_all_answered(store: Store) -> None:
    store.room_kinds.set(ROOM, members=("dana", "eli"))
    dana = team(store, "dana")
    t = tools(store, instance="dana")
    call(t, "vote", question="Ship?")
    call(t, "ballot", choice="yes")
    commit(store, t, dana)
    (vote,) = store.votes.asked_by("dana")
    assert (vote.humans, vote.bots, vote.electorate) == (
        ("U0ALICE",),
        ("dana", "eli"),
        ("slack:U0ALICE", "dana", "eli"),
    )
    assert dana.click(FeatureClick(vote.id, 1, "U0ALICE"))
    assert dana.click(FeatureClick(vote.id, 0, "U0ALICE"))  # the second click replaces the first
    assert store.votes.get(vote.id).is_open  # type: ignore[union-attr]
    store.votes.posted(vote.id, "1700000001.000200", T0)
    t = tools(store)
    call(t, "ballot", choice="no", vote_ts="1700000001.000200")
    commit(store, t, team(store), 2)
    closed = store.votes.get(vote.id)
    assert closed is not None and closed.status == "closed"
    assert closed.result == (
        "🗳️ Vote closed: “Ship?” — yes 2 (<@U0ALICE>, @dana) · no 1 (@eli) → *yes*. Everyone answered."
    )
    assert not dana.click(FeatureClick(vote.id, 1, "U0ALICE"))  # closed: the click changes nothing
    keys = {r.dedupe_key: r for r in store.outbox.queued("dana")}
    assert keys[f"vote-result:{vote.id}"].text == closed.result
    assert keys[f"vote-closed:{vote.id}"].vote_id == vote.id


def test_turn_notes_list_open_votes_not_answered_and_the_boards_tasks(store: Store) -> None:
    from nanoslack.team.notes import task_lines, vote_lines

    t = tools(store, instance="dana")
    call(t, "vote", question="Ship?", options="now, later")
    commit(store, t, team(store, "dana"))
    (vote,) = store.votes.asked_by("dana")
    assert vote_lines(store, "eli", ROOM) == []  # not out yet: nobody can name it
    store.votes.posted(vote.id, "1700000001.000200", T0)
    assert vote_lines(store, "eli", ROOM) == ["vote 1700000001.000200: Ship? (options: now, later)"]
    store.tasks.report(
        room=ROOM,
        thread_ts=THREAD,
        request_ts=ASK,
        instance="fay",
        status="input_required",
        text="review",
        now=T0,
    )
    assert task_lines(store, ROOM, T0 + 600) == [f"task {ASK}: fay — review (needs input · 10 min)"]


# -- the clock, racing itself ------------------------------------------------------------------


@pytest.fixture
def contenders(store_url: str, store: Store) -> Iterator[list[Store]]:
    opened = [Store.open(store_url) for _ in range(CONTENDERS)]
    yield opened
    for s in opened:
        s.close()


def race(stores: list[Store], each: Callable[[Store], None]) -> None:
    barrier = threading.Barrier(len(stores))

    def run(s: Store) -> None:
        barrier.wait()
        each(s)

    with ThreadPoolExecutor(len(stores)) as pool:
        list(pool.map(run, stores))


def keys_like(store: Store, prefix: str) -> list[str]:
    return [
        r.dedupe_key
        for r in store.outbox.queued("eli") + store.outbox.queued("dana")
        if r.dedupe_key.startswith(prefix)
    ]


def test_clocks_looking_at_once_ping_a_quiet_task_once_and_drop_it_once(
    store: Store, contenders: list[Store]
) -> None:
    store.tasks.report(
        room=ROOM, thread_ts=THREAD, request_ts=ASK, instance="eli", status="working", text="x", now=T0
    )
    with store.transaction():
        team(store).board.refresh(ROOM, T0, may_create=True)
    store.boards.posted(ROOM, "1700000000.000900")
    race(contenders, lambda s: team(s).clock.tick(T0 + 31 * 60))
    assert keys_like(store, "task-ping:") and len(keys_like(store, "task-ping:")) == 1
    race(contenders, lambda s: team(s).clock.tick(T0 + 2 * 3600 + 1))
    assert len(keys_like(store, "task-ping:")) == 1
    edits = [r.text for r in store.outbox.queued("eli") if r.dedupe_key.startswith("board:C0TEAM:")]
    assert edits.count(EMPTY) == 1 and edits[-1] == EMPTY  # the task left the board once
    assert store.tasks.open_in(ROOM) == [] and store.tasks.get(ROOM, ASK, "eli").status == "working"  # type: ignore[union-attr]


def test_a_quiet_task_is_pinged_once_however_often_the_clocks_look_before_it_goes_stale(
    store: Store, contenders: list[Store]
) -> None:
    """Every second and from clocks that disagree, between the ping (30 min) and the
    drop (2 h): one ping, not one per look."""
    store.tasks.report(
        room=ROOM, thread_ts=THREAD, request_ts=ASK, instance="eli", status="working", text="x", now=T0
    )
    with store.transaction():
        team(store).board.refresh(ROOM, T0, may_create=True)
    store.boards.posted(ROOM, "1700000000.000900")
    clock = team(store).clock
    for second in range(5):
        clock.tick(T0 + 30 * 60 + second)
    race(contenders, lambda s: team(s).clock.tick(T0 + 31 * 60 + contenders.index(s)))
    for minute in (45, 60, 90, 119):
        clock.tick(T0 + minute * 60)
    assert len(keys_like(store, "task-ping:")) == 1


def test_clocks_looking_at_once_remind_and_close_a_vote_once(store: Store, contenders: list[Store]) -> None:
    t = tools(store, instance="dana")
    call(t, "vote", question="Ship?")
    commit(store, t, team(store, "dana"))
    (vote,) = store.votes.asked_by("dana")
    (post,) = store.outbox.queued("dana")
    store.outbox.mark_sent(post.id, ROOM, "1700000001.000200")
    sent = store.outbox.get(post.id).sent_at  # type: ignore[union-attr]
    race(contenders, lambda s: team(s, "dana").clock.tick(sent or 0.0))  # adopted once
    adopted = store.votes.get(vote.id)
    assert adopted is not None and adopted.ts == "1700000001.000200"
    at = adopted.posted_at or 0.0
    race(contenders, lambda s: team(s, "dana", vote_remind=60, vote_close=120).clock.tick(at + 61))
    assert keys_like(store, "vote-remind:") == [f"vote-remind:{vote.id}"]
    race(contenders, lambda s: team(s, "dana", vote_remind=60, vote_close=120).clock.tick(at + 61 + 121))
    assert keys_like(store, "vote-result:") == [f"vote-result:{vote.id}"]
    assert keys_like(store, "vote-closed:") == [f"vote-closed:{vote.id}"]
    result = store.votes.get(vote.id).result  # type: ignore[union-attr]
    assert result is not None and result.endswith("→ no ballots. Abstained: <@U0ALICE>.")


def test_two_processes_reporting_at_once_leave_one_board_that_lists_both(
    store: Store, contenders: list[Store]
) -> None:
    def report(s: Store) -> None:
        who = ["eli", "fay"][contenders.index(s) % 2]
        with s.transaction():
            s.tasks.report(
                room=ROOM,
                thread_ts=THREAD,
                request_ts=f"1700000000.00{contenders.index(s)}",
                instance=who,
                status="working",
                text=f"task {contenders.index(s)}",
                now=T0,
            )
            team(s, who).board.refresh(ROOM, T0, may_create=True)

    race(contenders, report)
    posts = [
        r
        for r in store.outbox.queued("eli") + store.outbox.queued("fay")
        if r.dedupe_key.startswith("board:")
    ]
    assert [r.dedupe_key for r in posts if r.kind == "post"] == ["board:C0TEAM"]
    last = max(posts, key=lambda r: r.id)
    assert last.text == render(store.tasks.open_in(ROOM), T0)
    assert all(f"task {i}" in last.text for i in range(CONTENDERS))


def test_a_version_6_store_gains_the_team_tables_and_keeps_its_outbox(tmp_path: Any) -> None:
    import sqlite3

    from nanoslack.store import SCHEMA_VERSION, sqlite_url

    path = tmp_path / "v6.db"
    with Store.open(sqlite_url(str(path))) as fresh:
        fresh.outbox.enqueue(
            instance="dana", dedupe_key="turn:dana:1:0", purpose="reply", channel=ROOM, text="x"
        )
    conn = sqlite3.connect(path)
    conn.executescript(
        "DROP TABLE tasks; DROP TABLE boards; DROP TABLE votes; DROP TABLE ballots;"
        "ALTER TABLE outbox DROP COLUMN vote_id; UPDATE schema_meta SET value = '6' WHERE key = 'version';"
    )
    conn.close()
    with Store.open(sqlite_url(str(path))) as store:
        (row,) = store.outbox.queued("dana")
        assert (row.purpose, row.vote_id) == ("reply", None)
        assert store.tasks.open_in(ROOM) == [] and store.votes.asked_by("dana") == []
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT value FROM schema_meta WHERE key='version'").fetchone() == (
            str(SCHEMA_VERSION),
        )
    finally:
        conn.close()


def test_a_vote_click_is_read_from_its_button_and_an_owners_answer_is_not_one() -> None:
    from nanoslack.slack.blocks import answers_of, vote_clicks_of

    def body(*actions: dict[str, Any]) -> dict[str, Any]:
        return {"type": "block_actions", "user": {"id": "U0ALICE"}, "actions": list(actions)}

    click = body({"action_id": "nanoslack_vote_1", "value": "7:1"})
    assert vote_clicks_of(click) == [FeatureClick(item=7, option=1, by_user="U0ALICE")]
    assert answers_of(click) == []
    assert vote_clicks_of(body({"action_id": "nanoslack_vote_1", "value": "seven"})) == []
    assert vote_clicks_of(body({"action_id": "nanoslack_approve", "value": "3"})) == []
