"""What every turn in a team room is told about the room (a ``TurnNotes`` provider).

After the transcript, one line per open vote the bot has not answered (docs/team-rooms.md):
``vote <vote_ts>: <question> (options: a, b)``, and one per task on the room's board,
so two agents do not take one job twice:
``task <request_ts>: eli — write the parser (1/3 · sketching the API, 5 min)``.
"""

from __future__ import annotations

from collections.abc import Sequence

from nanoslack.inbound import ThreadKey
from nanoslack.store import MessageRow, Store
from nanoslack.team.board import age, progress


def vote_lines(store: Store, instance: str, channel: str) -> list[str]:
    lines = []
    for vote in reversed(store.votes.open_in(channel)):  # oldest first
        if any(b.voter == instance for b in store.votes.ballots(vote.id)):
            continue
        lines.append(f"vote {vote.ts}: {vote.question} (options: {', '.join(vote.options)})")
    return lines


def task_lines(store: Store, channel: str, now: float) -> list[str]:
    lines = []
    for task in store.tasks.open_in(channel):
        detail = " · ".join(p for p in (progress(task), age(now - task.created_at)) if p)
        lines.append(
            f"task {task.request_ts}: {task.instance} — {task.text or '(no description)'} ({detail})"
        )
    return lines


def room_notes(
    store: Store, instance: str, key: ThreadKey, msgs: Sequence[MessageRow], now: float
) -> list[str]:
    del msgs  # the room's state, not the turn's messages, decides what is said
    if not key.thread_key:
        return []  # a DM is no team room
    return [*vote_lines(store, instance, key.channel), *task_lines(store, key.channel, now)]
