"""Rooms that work as teams (docs/team-rooms.md): reports and the board, votes, directives.

``TeamFeature`` is one instance's part, a room feature (``nanoslack.features``; the root
registers it with the others):

- ``toolsets``: each turn's team tools (``nanoslack.tools.team``), offered with the host
  tools; what they mean to do waits in the turn's effects;
- ``apply``: inside the turn's transaction: reports move tasks (and the board), a vote is
  opened and its question queued, ballots are cast, a refused directive's note is
  queued. Exactly once, with the turn;
- ``notes``: the lines every turn in a group room is shown (open votes, open tasks);
- ``click``: a person's click on a vote's button (the edge parses it, the click router
  hands it here);
- ``clocks``: the team clock, which runs with the instance, posting what falls due.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nanoslack.agents import Tool, Turn
from nanoslack.config.team import TeamSettings
from nanoslack.features import Clock, RoomFeature
from nanoslack.inbound import FeatureClick, Identity, ThreadKey, bot_sender_id
from nanoslack.logs import get_logger
from nanoslack.store import MessageRow, Store
from nanoslack.team.board import BoardKeeper, render
from nanoslack.team.clock import TeamClock
from nanoslack.team.notes import room_notes
from nanoslack.team.votes import VoteKeeper
from nanoslack.tools.host import TurnEffects
from nanoslack.tools.team import Ballot, DirectiveRefused, Report, TeamTools, VoteOpen, Voters
from nanoslack.tools.toolbox import ToolFamily

__all__ = ["BoardKeeper", "TeamClock", "TeamFeature", "VoteKeeper", "render"]

log = get_logger(__name__)


class TeamFeature(RoomFeature):
    def __init__(
        self,
        store: Store,
        identity: Identity,
        settings: TeamSettings,
        *,
        voters: Voters | None = None,
        wake: Callable[[str], None] = lambda _instance: None,
    ) -> None:
        self._store = store
        self.instance = identity.instance
        self._voters = voters
        self.board = BoardKeeper(store, self.instance)
        self.votes = VoteKeeper(
            store,
            self.instance,
            remind_after=settings.vote_remind,
            close_after=settings.vote_close,
        )
        sender = bot_sender_id(identity.bot_id) if identity.bot_id else f"slack:bot:{self.instance}"
        self.clock = TeamClock(
            store,
            self.instance,
            board=self.board,
            votes=self.votes,
            settings=settings,
            sender_id=sender,
            wake=wake,
        )

    def toolsets(self) -> Sequence[ToolFamily]:
        return (self.tools,)

    def clocks(self) -> Mapping[str, Clock]:
        return {"team-clock": self.clock}

    def tools(
        self, turn_id: int, turn: Turn, msgs: Sequence[MessageRow], effects: TurnEffects
    ) -> list[Tool[Any]]:
        del turn_id
        return TeamTools(
            instance=self.instance,
            store=self._store,
            turn=turn,
            msgs=msgs,
            effects=effects,
            voters=self._voters,
        ).tools()

    def notes(self, instance: str, key: ThreadKey, msgs: Sequence[MessageRow]) -> list[str]:
        return room_notes(self._store, instance, key, msgs, time.time())

    def apply(self, turn_id: int, turn: Turn, effects: TurnEffects) -> None:
        """Inside the turn's transaction: what its team tools meant to do, in call order."""
        now = time.time()
        opened: int | None = None
        reported = False
        for i, act in enumerate(effects.acts):
            if isinstance(act, Report):
                self._report(turn, act, now)
                reported = True
            elif isinstance(act, VoteOpen):
                opened = self.votes.open(
                    room=turn.channel,
                    thread_ts=turn.thread_ts,
                    question=act.question,
                    options=act.options,
                    humans=act.humans,
                    bots=act.bots,
                    post_key=f"vote:{self.instance}:{turn_id}:{i}",
                    now=now,
                )
            elif isinstance(act, Ballot):
                self._ballot(act, opened, now)
            elif isinstance(act, DirectiveRefused):
                self._store.outbox.enqueue(
                    instance=self.instance,
                    dedupe_key=f"directive-refused:{self.instance}:{turn_id}:{i}",
                    purpose="notice",
                    channel=turn.channel,
                    thread_ts=turn.thread_ts or None,
                    text=act.text,
                )
                log.info("directive refused", instance=self.instance, turn=turn_id, room=turn.channel)
        if reported:
            self.board.refresh(turn.channel, now, may_create=True)

    def _report(self, turn: Turn, act: Report, now: float) -> None:
        task = self._store.tasks.report(
            room=turn.channel,
            thread_ts=turn.thread_ts,
            request_ts=act.request_ts,
            instance=self.instance,
            status=act.status,
            text=act.text,
            now=now,
            progress_done=act.progress_done,
            progress_total=act.progress_total,
            step=act.step,
        )
        log.info("task reported", instance=self.instance, task=task.id, room=turn.channel, status=task.status)

    def _ballot(self, act: Ballot, opened: int | None, now: float) -> None:
        vote_id = act.vote_id if act.vote_id is not None else opened
        vote = self._store.votes.get(vote_id) if vote_id is not None else None
        if vote is not None:
            self.votes.cast(vote, voter=self.instance, kind="bot", choice=act.choice, now=now)

    def click(self, click: FeatureClick) -> bool:
        """A person's ballot on a vote (``click.item``; one each, a second click replaces
        the first)."""
        with self._store.transaction():
            return self.votes.cast_human(click.item, click.option, slack_user=click.by_user, now=time.time())
