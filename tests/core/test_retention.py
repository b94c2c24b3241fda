"""The store stays bounded: finished rows older than the retention are pruned,
what is still waiting (pending, held, unfinished, queued) never is."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from pathlib import Path

from nanoslack.asks import APPROVAL, OwnerAsks
from nanoslack.config.files import FileSettings
from nanoslack.housekeeping import prune_once
from nanoslack.inbound import FileRef, Inbound
from nanoslack.slack.files import FileFetcher
from nanoslack.store import Store
from nanoslack.store.retention import Retention
from tests.core.core_helpers import INSTANCE, ROOM, message

DAY = 86400.0


def _received(store: Store, status: str | None) -> Inbound:
    """A message in the inbox, finished as ``status`` (None: still received)."""
    msg = message()
    store.inbox.record(msg)
    if status is not None:
        store.inbox.finish(msg.key, status)
    return msg


def _backdate(sql: Callable[[str], int], days: float) -> None:
    """Everything written so far happened ``days`` ago."""
    shift = days * DAY
    sql(f"UPDATE inbox SET received_at = received_at - {shift}, finished_at = finished_at - {shift}")
    sql(f"UPDATE messages SET created_at = created_at - {shift}")
    sql(f"UPDATE outbox SET created_at = created_at - {shift}, sent_at = sent_at - {shift}")
    sql(f"UPDATE turns SET started_at = started_at - {shift}, finished_at = finished_at - {shift}")


def _inbox_status(store: Store, msg: Inbound) -> str | None:
    return store.inbox.status(msg.key)


def test_old_finished_inbox_rows_and_room_context_are_pruned_but_waiting_messages_never(
    store: Store, sql: Callable[[str], int]
) -> None:
    old_context = _received(store, "done")
    store.messages.add(old_context, group_id=None, status="context")
    old_dropped = _received(store, "dropped")
    old_pending = _received(store, "done")
    store.messages.add(old_pending, group_id=None, status="pending")
    old_held = _received(store, "done")
    store.messages.add(old_held, group_id=None, status="held")
    old_unfinished = _received(store, None)
    old_failed = _received(store, "failed")
    _backdate(sql, 20)
    recent = _received(store, "done")
    store.messages.add(recent, group_id=None, status="context")

    report = Retention(store.db, days=14, batch=2).prune_all()

    assert report.deleted["inbox"] == 2 and report.deleted["messages"] == 1
    assert _inbox_status(store, old_context) is None and store.messages.get(old_context.key) is None
    assert _inbox_status(store, old_dropped) is None
    assert store.messages.get(old_pending.key) is not None and _inbox_status(store, old_pending) == "done"
    assert store.messages.get(old_held.key) is not None and _inbox_status(store, old_held) == "done"
    assert _inbox_status(store, old_unfinished) == "received"
    assert old_unfinished in store.inbox.unfinished(INSTANCE)
    assert _inbox_status(store, old_failed) == "failed"
    assert _inbox_status(store, recent) == "done" and store.messages.get(recent.key) is not None


def test_a_pending_or_held_message_is_never_pruned_however_old(
    store: Store, sql: Callable[[str], int]
) -> None:
    waiting = [message() for _ in range(5)]
    for i, msg in enumerate(waiting):
        store.inbox.record(msg)
        store.inbox.finish(msg.key, "done")
        store.messages.add(msg, group_id=None, status="pending" if i % 2 else "held")
    _backdate(sql, 400)

    Retention(store.db, days=1, batch=1).prune_all()

    assert len(store.messages.pending(INSTANCE)) == 2
    assert all(store.messages.get(m.key) is not None for m in waiting)
    assert all(_inbox_status(store, m) == "done" for m in waiting)


def test_sent_posts_are_pruned_but_queued_posts_and_approval_requests_stay(
    store: Store, sql: Callable[[str], int]
) -> None:
    sent = store.outbox.enqueue(instance=INSTANCE, dedupe_key="turn:1:0", channel=ROOM, text="hi")
    queued = store.outbox.enqueue(instance=INSTANCE, dedupe_key="turn:2:0", channel=ROOM, text="later")
    # An approval request still open: its DM is edited whenever the answer comes.
    assert OwnerAsks(store, instance=INSTANCE, owners=["U0OWNER"]).open(APPROVAL, "7", "may eli talk?")
    (dm,) = [r for r in store.outbox.queued(INSTANCE) if r.purpose == "ask"]
    request = dm.id
    assert sent and queued and request
    store.outbox.mark_sent(sent, ROOM, "1700000001.000001")
    store.outbox.mark_sent(request, "D0OWNER", "1700000001.000002")
    _backdate(sql, 20)
    recent = store.outbox.enqueue(instance=INSTANCE, dedupe_key="turn:3:0", channel=ROOM, text="new")
    assert recent
    store.outbox.mark_sent(recent, ROOM, "1700000001.000003")

    Retention(store.db, days=14).prune_all()

    assert store.outbox.get(sent) is None
    assert store.outbox.get(queued) is not None
    assert store.outbox.get(request) is not None
    assert store.outbox.get(recent) is not None


def test_a_sent_files_bytes_go_with_its_outbox_row_and_a_file_still_to_send_keeps_them(
    store: Store, sql: Callable[[str], int]
) -> None:
    def queue(key: str) -> int:
        file_row = store.outbox.enqueue_file(
            instance=INSTANCE,
            dedupe_key=key,
            turn_id=1,
            channel=ROOM,
            thread_ts=None,
            filename="report.md",
            title="report.md",
            content="# Report",
            comment="",
        )
        assert file_row is not None
        return file_row

    sent, waiting = queue("file:1:0"), queue("file:2:0")
    store.outbox.file_uploaded(sent, "F0SENT")
    store.outbox.mark_sent(sent, ROOM, "F0SENT")
    _backdate(sql, 20)

    report = Retention(store.db, days=14).prune_all()

    assert store.outbox.get(sent) is None and store.outbox.file_of(sent) is None
    assert report.deleted["outbox_files"] == 1
    kept = store.outbox.file_of(waiting)
    assert kept is not None and kept.content == "# Report" and kept.file_id is None


def test_old_turns_are_pruned_but_a_threads_newest_turn_keeps_where_the_next_transcript_starts(
    store: Store, sql: Callable[[str], int]
) -> None:
    def turn(through: str, status: str | None) -> int:
        turn_id = _thread_turn(store, through)
        if status is not None:
            store.turns.finish(turn_id, status)
        return turn_id

    first = turn("1700000000.000002", "done")
    second = turn("1700000000.000005", "silent")
    running = turn("1700000000.000009", None)
    for turn_id in (first, second, running):
        store.steps.add(turn_id, 1, kind="model", name="gpt-test", tokens=10)
    _backdate(sql, 30)

    Retention(store.db, days=14).prune_all()

    assert store.turns.get(first) is None
    assert store.turns.get(second) is not None and store.turns.get(running) is not None
    assert store.turns.last_through(INSTANCE, ROOM, "1700000000.000001") == "1700000000.000005"
    # A turn's steps go with it, and only with it.
    assert [len(store.steps.of(t)) for t in (first, second, running)] == [0, 1, 1]


def test_peoples_feedback_on_a_pruned_turn_goes_with_it_and_a_kept_turns_stays(
    store: Store, sql: Callable[[str], int]
) -> None:
    def turn(through: str) -> int:
        turn_id = _thread_turn(store, through)
        store.turns.finish(turn_id, "done")
        return turn_id

    old, newest = turn("1700000000.000002"), turn("1700000000.000005")
    for turn_id in (old, newest):
        assert store.feedback.record(INSTANCE, turn_id, "U0A", "positive")
        assert store.feedback.record(INSTANCE, turn_id, "U0B", "negative")
    _backdate(sql, 30)

    report = Retention(store.db, days=14).prune_all()

    assert store.turns.get(old) is None and store.turns.get(newest) is not None
    assert report.deleted["feedback"] == 2
    assert store.feedback.counts([old, newest]) == {newest: {"positive": 1, "negative": 1}}


def test_the_background_prune_yields_to_the_loop_between_batches(
    store: Store, sql: Callable[[str], int]
) -> None:
    for _ in range(50):
        msg = _received(store, "done")
        store.messages.add(msg, group_id=None, status="context")
    _backdate(sql, 20)

    async def run() -> tuple[int, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        report = await prune_once(Retention(store.db, days=14, batch=10))
        task.cancel()
        return report.total, ticks

    total, ticks = asyncio.run(run())
    assert total == 100
    assert ticks >= 10  # the loop ran between the batches, not once after the whole prune


def _insert(sql: Callable[[str], int], table: str, **cols: object) -> None:
    """An operator's INSERT (numbers and booleans as SQL literals, the rest quoted)."""

    def literal(v: object) -> str:
        if v is None:
            return "NULL"
        if isinstance(v, bool):
            return "true" if v else "false"
        return str(v) if isinstance(v, int | float) else "'" + str(v).replace("'", "''") + "'"

    sql(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join(map(literal, cols.values()))})")


def test_finished_rounds_tasks_and_votes_are_pruned_but_work_under_way_never(
    store: Store, sql: Callable[[str], int]
) -> None:
    old = 1_000_000.0  # long before any retention
    for rid, status in ((1, "closed"), (2, "stopped"), (3, "open"), (4, "waiting")):
        over = status in ("closed", "stopped")
        _insert(
            sql,
            "rounds",
            id=rid,
            room="C0R",
            thread_key="t",
            question_ts=f"{rid}.0",
            question="q",
            named=False,
            status=status,
            created_at=old,
            closed_at=old if over else None,
        )
        _insert(sql, "round_members", round_id=rid, instance="dana", status="done", joined_at=old)
    # Task 1 is closed, task 2 went stale, task 3 is still being worked on (quiet or not).
    for tid, closed, stale in ((1, old, None), (2, None, old), (3, None, None)):
        _insert(
            sql,
            "tasks",
            id=tid,
            room="C0R",
            thread_ts="t",
            request_ts=f"{tid}.0",
            instance="dana",
            status="working",
            text="x",
            created_at=old,
            updated_at=old,
            closed_at=closed,
            stale_at=stale,
        )
    for vid, status in ((1, "closed"), (2, "open"), (3, "closed")):
        _insert(
            sql,
            "votes",
            id=vid,
            room="C0R",
            thread_ts="t",
            instance="dana",
            question="q",
            options='["yes"]',
            humans="[]",
            bots="[]",
            post_key=f"vote:{vid}",
            status=status,
            closed_at=old if status == "closed" else None,
            created_at=old,
        )
        _insert(sql, "ballots", vote_id=vid, voter="eli", kind="bot", choice="yes", cast_at=old)
    # Vote 3's result is still to be posted: the poster reads the vote.
    store.outbox.enqueue(
        instance="dana", dedupe_key="vote-result:3", purpose="post", channel="C0R", text="r", vote_id=3
    )

    report = Retention(store.db, days=14).prune_all()

    assert [r is not None for r in map(store.rounds.get, (1, 2, 3, 4))] == [False, False, True, True]
    assert [len(store.rounds.members(r)) for r in (1, 2, 3, 4)] == [0, 0, 1, 1]
    assert [t.request_ts for t in store.tasks.open_in("C0R")] == ["3.0"]
    assert (report.deleted["tasks"], report.deleted["votes"], report.deleted["ballots"]) == (2, 1, 1)
    assert [v is not None for v in map(store.votes.get, (1, 2, 3))] == [False, True, True]
    assert [len(store.votes.ballots(v)) for v in (2, 3)] == [1, 1]


def test_old_routine_runs_are_pruned_but_each_routines_newest_and_running_rows_stay(
    store: Store, sql: Callable[[str], int]
) -> None:
    for due in (100.0, 200.0, 300.0):
        store.routines.claim(INSTANCE, "plan", due, "done")
    store.routines.claim(INSTANCE, "beat", 100.0, "missed")
    running = store.routines.claim(INSTANCE, "slow", 100.0, "running")
    store.routines.claim(INSTANCE, "slow", 200.0, "skipped", "still running")
    sql(f"UPDATE routine_runs SET ended_at = ended_at - {30 * DAY}")
    report = Retention(store.db, days=14).prune_all()
    assert report.deleted["routine_runs"] == 2  # plan's two older rows
    assert [r.due_at for r in store.routines.history(INSTANCE, "plan")] == [300.0]
    assert [r.due_at for r in store.routines.history(INSTANCE, "beat")] == [100.0]
    assert {r.id for r in store.routines.history(INSTANCE, "slow")} >= {running}


def test_old_assistant_pane_contexts_and_abandoned_reply_drafts_are_pruned_but_recent_ones_stay(
    store: Store, sql: Callable[[str], int]
) -> None:
    for thread, channel in (("1.0", "C_OLD"), ("2.0", "C_NEW")):
        store.assistant_threads.record(
            instance=INSTANCE, channel="D1", thread_ts=thread, user_id="U1", context_channel=channel
        )
    sql(f"UPDATE assistant_threads SET updated_at = updated_at - {30 * DAY} WHERE thread_ts = '1.0'")
    old_turn = _dm_turn(store, "1.0")
    store.turns.finish(old_turn, "halted")  # a DM runs one turn at a time
    running = _dm_turn(store, "2.0")
    store.reply_drafts.open(INSTANCE, old_turn, "D1", "1.0")
    store.reply_drafts.open(INSTANCE, running, "D1", "2.0")
    sql(f"UPDATE reply_drafts SET started_at = started_at - {30 * DAY}")
    report = Retention(store.db, days=14).prune_all()
    assert report.deleted["assistant_threads"] == 1
    assert report.deleted["reply_drafts"] == 1
    viewing = store.assistant_threads.viewing(INSTANCE, "D1")
    assert viewing is not None and viewing.channel == "C_NEW"
    assert store.reply_drafts.of_turn(INSTANCE, old_turn) is None
    assert store.reply_drafts.of_turn(INSTANCE, running) is not None


def _dm_turn(store: Store, through_ts: str) -> int:
    return store.turns.start(
        instance=INSTANCE,
        channel="D1",
        thread_key="",
        reply_thread_ts="",
        sender_id="slack:U1",
        through_ts=through_ts,
        messages=1,
        wrapping_up=False,
    )


def test_a_messages_files_and_their_download_go_with_it_and_a_file_still_named_stays(
    store: Store, sql: Callable[[str], int], tmp_path: Path
) -> None:
    old = dataclasses.replace(message(), files=(FileRef("F0OLD", "a.txt", "text/plain", 1, "https://x/a"),))
    shared = FileRef("F0BOTH", "b.txt", "text/plain", 1, "https://x/b")
    old_shared = dataclasses.replace(message(), files=(shared,))
    for msg in (old, old_shared):
        store.messages.add(msg, group_id=None, status="pending")
    _backdate(sql, 20)
    recent = dataclasses.replace(message(), files=(shared,))
    store.messages.add(recent, group_id=None, status="pending")
    sql("UPDATE messages SET status = 'done'")  # answered
    folder = tmp_path / "files"
    folder.mkdir()
    fetcher = FileFetcher(FileSettings(folder=folder), api_url="https://slack.com/api/")
    for file_id in ("F0OLD", "F0BOTH"):
        (folder / file_id).write_bytes(b"x")

    report = Retention(store.db, days=14).prune_all()
    removed = fetcher.prune(store.message_files.file_ids(), older_than_s=0)

    assert report.deleted["message_files"] == 2
    assert store.message_files.of(INSTANCE, ROOM, [old.ts, recent.ts]) == {recent.ts: (shared,)}
    assert removed == 1
    assert sorted(p.name for p in folder.iterdir()) == ["F0BOTH"]


def _thread_turn(store: Store, through: str) -> int:
    """A person's turn in one room thread, through the message ``through``."""
    return store.turns.start(
        instance=INSTANCE,
        channel=ROOM,
        thread_key="1700000000.000001",
        reply_thread_ts="1700000000.000001",
        sender_id="slack:U0HUMAN",
        through_ts=through,
        messages=1,
        wrapping_up=False,
    )
