"""What a turn remembers of its thread, and what it keeps for the next (docs/memory.md).

``ThreadMemory.recall`` reads the thread's ``agent_history`` and the notes the turn may
see, and says what the turn replays:

- **the window**: the first turn always, then the newest turns that fit in
  ``NANOSLACK_HISTORY_CHARS``. Past the bound the oldest turns after the first are
  dropped until the rest fits in three quarters of it, so the cut moves seldom and the
  replayed prefix stays the same (and cached) for many turns in between. The window is
  a pure function of the rows' sizes: every turn computes the same one.
- **the opening**: the system prompt and the notes as the thread's opening showed them.
  It is rebuilt (current persona, current notes) when the window was just cut, or when
  the teammate's files changed; otherwise a note written or forgotten elsewhere reaches
  the turn as a ``[Notes changed]`` line at the head of its new part.

``Recall.record`` is the turn's row, written by the recorder in the turn's transaction.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nanoslack.agents import PastTurn, Turn, render_prompt
from nanoslack.logs import get_logger
from nanoslack.store import NoteRow, Store
from nanoslack.store.history import HistoryRow, Unreadable, parse_row
from nanoslack.tools.memory import NoteChanges, asker_label

log = get_logger(__name__)

# The fraction of the bound a cut brings the history down to.
CUT_TO = 0.75
_SESSION_NAMESPACE = uuid.UUID("5b0c4f5e-3c55-4f0e-9a0e-6e616e6f736c")
NOTES_CHANGED = "[Notes changed]"
HEADINGS = {"self": "[Your notes]", "private": "[Private notes]", "room": "[Notes of this room]"}


def window(sizes: Sequence[int], limit: int) -> int:
    """Index of the first turn kept after the first one (``len(sizes)`` when none is)."""
    if not sizes:
        return 0
    start, total = 1, sizes[0]
    for i in range(1, len(sizes)):
        total += sizes[i]
        if total > limit:
            while start < i and total > limit * CUT_TO:
                total -= sizes[start]
                start += 1
    return start


def session_id(instance: str, channel: str, thread_key: str) -> str:
    """``NANOSLACK_SESSION``: stable per (instance, conversation, thread), a UUID as CLI
    agents' session flags expect."""
    return str(uuid.uuid5(_SESSION_NAMESPACE, f"{instance}/{channel}/{thread_key}"))


@dataclass(frozen=True)
class Recall:
    """What a turn was given of its thread, and what its own row must say."""

    channel: str  # the history's conversation (a turn no message woke: ``TurnOrigin.conversation``)
    thread_key: str
    history: tuple[PastTurn, ...] = ()
    not_shown: int = 0
    system: str = ""  # the persona in force in this thread
    memory: tuple[str, ...] = ()  # the opening's notes block
    notes_changed: tuple[str, ...] = ()
    session: str = ""
    opening: str = ""  # JSON of a rebuilt opening, to store with this turn ("" if kept)
    visible: tuple[int, ...] = ()  # the note ids the turn knows of as it starts
    has_history: bool = False

    def apply(self, turn: Turn) -> Turn:
        return dataclasses.replace(
            turn,
            system=self.system,
            memory=self.memory,
            history=self.history,
            history_not_shown=self.not_shown,
            notes_changed=self.notes_changed,
            session=self.session,
        )


@dataclass
class ThreadMemory:
    instance: str
    store: Store
    history_chars: int
    name_of: Callable[[str], str]  # users.id → display name
    # False for a back end that answers without history (``Agent.remembers``).
    enabled: bool = True

    def recall(self, channel: str, thread_key: str, *, persona: str, owner_dm: bool) -> Recall:
        if not self.enabled:
            return Recall(channel, thread_key, system=persona)
        conversation = f"slack:{channel}"
        notes = self.store.memories.visible(self.instance, conversation, private=owner_dm)
        rows, not_shown, cut_now = self._window(channel, thread_key)
        session = session_id(self.instance, channel, thread_key)
        opened = _latest_opening(rows)
        if opened is None or cut_now or opened[0] != persona:
            block = self.notes_block(notes)
            return Recall(
                channel,
                thread_key,
                history=tuple(_past(row) for row in rows),
                not_shown=not_shown,
                system=persona,
                memory=block,
                session=session,
                opening=json.dumps({"system": persona, "notes": list(block)}, ensure_ascii=False),
                visible=tuple(n.id for n in notes),
                has_history=bool(rows),
            )
        known = set(rows[-1].notes_known)
        return Recall(
            channel,
            thread_key,
            history=tuple(_past(row) for row in rows),
            not_shown=not_shown,
            system=opened[0],
            memory=opened[1],
            notes_changed=self._changes(notes, known),
            session=session,
            visible=tuple(n.id for n in notes),
            has_history=True,
        )

    def _window(self, channel: str, thread_key: str) -> tuple[list[HistoryRow], int, bool]:
        sizes = self.store.history.sizes(self.instance, channel, thread_key)
        if not sizes:
            return [], 0, False
        chars = [c for _, c in sizes]
        start = window(chars, self.history_chars)
        cut_now = len(sizes) > 1 and start != window(chars[:-1], self.history_chars)
        # Past the end when only the first row is kept: no later row has that id.
        start_id = sizes[start][0] if start < len(sizes) else sizes[-1][0] + 1
        rows: list[HistoryRow] = []
        bodies = self.store.history.bodies
        for raw in bodies(self.instance, channel, thread_key, first=sizes[0][0], start=start_id):
            try:
                rows.append(parse_row(raw))
            except Unreadable as exc:
                log.warning(
                    "agent history unreadable",
                    instance=self.instance,
                    channel=channel,
                    thread=thread_key,
                    error=str(exc),
                )
        return rows, max(0, start - 1), cut_now

    def notes_block(self, notes: Sequence[NoteRow]) -> tuple[str, ...]:
        lines: list[str] = []
        for scope, heading in HEADINGS.items():
            mine = [n for n in notes if n.scope == scope]
            if mine:
                lines.append(heading)
                lines.extend(self.note_line(n) for n in mine)
        return tuple(lines)

    def note_line(self, note: NoteRow) -> str:
        day = time.strftime("%Y-%m-%d", time.gmtime(note.created_at))
        who = asker_label(note.asked_by) or self.name_of(note.asked_by)
        return f"{note.ref} ({day}, asked by {who}): {note.text}"

    def _changes(self, notes: Sequence[NoteRow], known: set[int]) -> tuple[str, ...]:
        added = [n for n in reversed(notes) if n.id not in known]  # oldest first
        gone = sorted(known - {n.id for n in notes})
        return (
            *(f"{NOTES_CHANGED} + {self.note_line(n)}" for n in added),
            *(f"{NOTES_CHANGED} − m{i}" for i in gone),
        )

    def record(
        self,
        recall: Recall,
        *,
        turn_id: int,
        turn: Turn,
        posts: Sequence[str],
        messages: str = "",
        chars: int = 0,
        changes: NoteChanges | None = None,
    ) -> None:
        """Inside the turn's transaction: its row of the thread's history."""
        if not self.enabled:
            return
        prompt = render_prompt(turn)
        changes = changes or NoteChanges()
        known = (set(recall.visible) | set(changes.written)) - set(changes.forgotten)
        self.store.history.add(
            instance=self.instance,
            channel=recall.channel,
            thread_key=recall.thread_key,
            turn_id=turn_id,
            prompt=prompt,
            messages=messages,
            posts=posts,
            opening=recall.opening,
            notes_known=sorted(known),
            chars=chars or len(prompt) + sum(len(p) for p in posts),
        )


def _latest_opening(rows: Sequence[HistoryRow]) -> tuple[str, tuple[str, ...]] | None:
    for row in reversed(rows):
        if row.opening:
            try:
                data = json.loads(row.opening)
                system, notes = data["system"], data["notes"]
                if isinstance(system, str) and isinstance(notes, list):
                    return system, tuple(str(n) for n in notes)
            except (ValueError, KeyError, TypeError):
                pass
            return None  # unreadable: rebuilt with this turn
    return None


def _past(row: HistoryRow) -> PastTurn:
    return PastTurn(prompt=row.prompt, messages=row.messages, posts=row.posts)
