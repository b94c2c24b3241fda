"""What falls due in team rooms, found in the store by each instance's clock.

Every ``tick`` seconds an instance looks at what it keeps: the boards it posted (their
tasks' pings and staleness, an age refresh now and then) and the votes it asked (the
question adopted once it is out, which wakes the room's bots; the reminder; the close).
Nothing is kept in memory: a restart, or a standby that took the instance's lease over,
finds the same rows and carries on. Each step is claimed by a guarded update in the
transaction that queues its post, and the post's outbox key is unique, so two processes
looking at once still post each ping, reminder and result once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from nanoslack.config.team import TeamSettings
from nanoslack.logs import get_logger
from nanoslack.store import BoardRow, Store, TaskRow, VoteRow
from nanoslack.team.board import EMPTY, BoardKeeper
from nanoslack.team.votes import VoteKeeper, duration

log = get_logger(__name__)

# A board listing open tasks is looked at again this often, so the ages it shows move on.
BOARD_REFRESH_S = 300.0

PING_TEXT = (
    "⏰ @{instance}, your task “{task}” has been quiet for {quiet}: report where it stands "
    "(still working, with progress; finished; or dropped)."
)


class TeamClock:
    def __init__(
        self,
        store: Store,
        instance: str,
        *,
        board: BoardKeeper,
        votes: VoteKeeper,
        settings: TeamSettings,
        sender_id: str,
        wake: Callable[[str], None] = lambda _instance: None,
    ) -> None:
        self._store = store
        self._me = instance
        self._board = board
        self._votes = votes
        self._settings = settings
        # Who a woken bot's transcript says the vote came from (this instance's bot).
        self._sender_id = sender_id
        self._wake = wake

    async def run(self) -> None:
        while True:
            try:
                self.tick(time.time())
            except Exception as exc:  # the store hiccuped: the next tick finds the same rows
                log.error("team clock failed", instance=self._me, error=f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(self._settings.tick)

    def tick(self, now: float) -> None:
        for board in self._store.boards.kept_by(self._me):
            self._look_at_board(board, now)
        self._quiet_tasks(now)
        for vote in self._store.votes.asked_by(self._me):
            self._look_at_vote(vote, now)

    # -- boards and tasks -------------------------------------------------------------------

    def _look_at_board(self, board: BoardRow, now: float) -> None:
        if board.ts is None:
            row = self._store.outbox.get_by_key(board.post_key)
            if row is not None and row.status == "sent" and row.posted_ts:
                self._store.boards.posted(board.room, row.posted_ts)
            return
        if board.text != EMPTY and now - board.updated_at >= BOARD_REFRESH_S:
            with self._store.transaction():
                self._board.refresh(board.room, now)

    def _quiet_tasks(self, now: float) -> None:
        ping, stale = self._settings.task_ping, self._settings.task_stale
        for task in self._store.tasks.quiet(self._me, before=now - min(ping, stale)):
            silence = now - task.updated_at
            with self._store.transaction():
                if silence >= stale:
                    self._stale(task, now)
                elif task.status == "working" and task.pinged_at is None and silence >= ping:
                    self._ping(task, now)

    def _ping(self, task: TaskRow, now: float) -> None:
        if not self._store.tasks.claim_ping(task, now):
            return
        text = PING_TEXT.format(
            instance=task.instance,
            task=task.text or task.request_ts,
            quiet=duration(self._settings.task_ping),
        )
        self._store.outbox.enqueue(
            instance=self._me,
            dedupe_key=f"task-ping:{task.id}:{task.updated_at:.6f}",
            purpose="notice",
            channel=task.room,
            thread_ts=task.thread_ts or None,
            text=text,
        )
        log.info("task ping", instance=self._me, task=task.id, owner=task.instance, room=task.room)

    def _stale(self, task: TaskRow, now: float) -> None:
        """Quiet too long to count as in progress: off the board, its status untouched."""
        if self._store.tasks.claim_stale(task, now):
            self._board.refresh(task.room, now)
            log.info("task stale", instance=self._me, task=task.id, owner=task.instance, room=task.room)

    # -- votes ------------------------------------------------------------------------------

    def _look_at_vote(self, vote: VoteRow, now: float) -> None:
        if vote.ts is None:
            self._adopt(vote, now)
            return
        due = self._votes.due(vote, now)
        if due is None:
            return
        with self._store.transaction():
            if due == "remind":
                self._votes.remind(vote, now)
            else:
                self._votes.close(vote, now)

    def _adopt(self, vote: VoteRow, now: float) -> None:
        """The question is out: the vote is named by its message's ts from now on, its
        clock starts, and the room's bots are woken to answer it (their turn lists it)."""
        row = self._store.outbox.get_by_key(vote.post_key)
        if row is None or row.status in ("failed", "cancelled"):
            if self._store.votes.unpostable(vote.id, now):
                log.warning(
                    "vote not posted", instance=self._me, vote=vote.id, status=row.status if row else None
                )
            return
        if row.status != "sent" or not row.posted_ts:
            return
        woken = []
        with self._store.transaction():
            if not self._store.votes.posted(vote.id, row.posted_ts, row.sent_at or now):
                return
            for bot in vote.bots:
                if bot != self._me and self._store.messages.wake(
                    instance=bot,
                    channel=vote.room,
                    ts=row.posted_ts,
                    thread_key=vote.thread_ts,
                    sender_id=self._sender_id,
                    text=row.text,
                ):
                    woken.append(bot)
        log.info("vote posted", instance=self._me, vote=vote.id, ts=row.posted_ts, woken=woken)
        for bot in woken:
            self._wake(bot)
