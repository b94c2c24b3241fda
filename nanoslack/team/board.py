"""The room's task board (docs/team-rooms.md): what a report does to it, and what it says.

The board is one message per room. The first open task creates it: the reporting
instance's app posts it (outbox key ``board:<room>``, the one claim there can be), and
from then on it is only edited: each change queues a ``chat.update`` of that message by
that app (an update row naming the post, or its ts once known), never a new post. What
it said last is kept (``boards.text``), so an edit is queued only when the text changes.
``nanoslack board CHANNEL`` prints the same text.
"""

from __future__ import annotations

from collections.abc import Sequence

from nanoslack.logs import get_logger
from nanoslack.store import Store, TaskRow

log = get_logger(__name__)

TITLE = "📋 *Task board*"
EMPTY = f"{TITLE} · nothing open right now"


def age(seconds: float) -> str:
    """How long ago, as the board says it: "just now", "12 min", "1 h 5 min"."""
    minutes = int(max(0.0, seconds) // 60)
    if minutes < 1:
        return "just now"
    if minutes < 60:
        return f"{minutes} min"
    hours, rest = divmod(minutes, 60)
    return f"{hours} h {rest} min" if rest else f"{hours} h"


def progress(task: TaskRow) -> str:
    """ "3/5 · writing the tests", "needs input", or "" when the task said nothing yet."""
    parts = []
    if task.status == "input_required":
        parts.append("needs input")
    if task.progress_total:
        parts.append(f"{task.progress_done or 0}/{task.progress_total}")
    elif task.progress_done:
        parts.append(f"{task.progress_done} done")
    if task.step:
        parts.append(task.step)
    return " · ".join(parts)


def task_line(task: TaskRow, now: float) -> str:
    what = task.text or "(no description)"
    parts = [f"*{task.instance}* — {what}"]
    if progress(task):
        parts.append(progress(task))
    parts.append(age(now - task.created_at))
    return "• " + " · ".join(parts)


def render(tasks: Sequence[TaskRow], now: float) -> str:
    """The board's text: its open tasks (who, what, progress, age), oldest first."""
    if not tasks:
        return EMPTY
    lines = [f"{TITLE} · {len(tasks)} open"]
    lines.extend(task_line(task, now) for task in tasks)
    return "\n".join(lines)


def board_key(room: str) -> str:
    return f"board:{room}"


class BoardKeeper:
    def __init__(self, store: Store, instance: str) -> None:
        self._store = store
        self._me = instance

    def refresh(self, room: str, now: float, *, may_create: bool = False) -> bool:
        """Inside a transaction: the board says what the room's tasks are now. Creates it
        (``may_create``, and only for an open task) or queues an edit; True when something
        was queued."""
        store = self._store
        board = store.boards.lock(room)
        tasks = store.tasks.open_in(room)
        if board is None:
            if not may_create or not tasks:
                return False
            if store.boards.create(room, instance=self._me, post_key=board_key(room), now=now):
                text = render(tasks, now)
                store.outbox.enqueue(
                    instance=self._me, dedupe_key=board_key(room), purpose="notice", channel=room, text=text
                )
                store.boards.said(room, text, now)
                log.info("board created", instance=self._me, room=room, tasks=len(tasks))
                return True
            board = store.boards.lock(room)  # another process made it just now
            if board is None:
                return False
            tasks = store.tasks.open_in(room)
        text = render(tasks, now)
        if text == board.text:
            store.boards.said(room, text, now)  # looked at: the clock's next look is later
            return False
        store.outbox.enqueue(
            instance=board.instance,  # a message is edited by the app that posted it
            dedupe_key=f"{board.post_key}:{board.version}",
            kind="update",
            purpose="notice",
            channel=room,
            update_ts=board.ts,
            update_of=None if board.ts else board.post_key,
            text=text,
        )
        store.boards.said(room, text, now)
        log.info("board updated", instance=self._me, room=room, tasks=len(tasks))
        return True
