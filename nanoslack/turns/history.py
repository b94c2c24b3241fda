"""What a turn remembers of its thread, and what it keeps for the next (docs/memory.md).

``ThreadMemory.recall`` reads the thread's ``agent_history`` and the notes the turn may
see, and says what the turn replays:

- **the window**: the first turn always, then the newest turns that fit in
  ``NANOSLACK_HISTORY_CHARS``. Past the bound the oldest turns after the first are
  dropped until the rest fits in three quarters of it, so the cut moves seldom and the
  replayed prefix stays the same (and cached) for many turns in between. The window is
  a pure function of the rows' sizes: every turn computes the same one.
- **the opening**: the system prompt, the teammates and the notes as the thread's opening
  showed them. It is rebuilt (current persona, teammates and notes) when the window was
  just cut, or when the teammate's files changed; otherwise a note written or forgotten
  elsewhere reaches the turn as a ``[Notes changed]`` line at the head of its new part, and
  a teammate added, gone, with a new role or now (no longer) in the conversation as a
  ``[Teammates changed]`` line, once: the row of the turn that showed it keeps the list as
  the thread now knows it (``Opening.known``), with the opening unchanged.

``Recall.record`` is the turn's row, written by the recorder in the turn's transaction.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nanoslack.agents import Line, PastTurn, Turn, render_prompt
from nanoslack.agents.prompt import DELETED_LINE, EDITED_TAG, render_line
from nanoslack.agents.teammates import Mate
from nanoslack.logs import get_logger
from nanoslack.store import NoteRow, Store
from nanoslack.store.history import HistoryRow, Span, Unreadable, parse_row, scrub_shown, spans_json
from nanoslack.tools.memory import NoteChanges, asker_label

log = get_logger(__name__)

# The fraction of the bound a cut brings the history down to.
CUT_TO = 0.75
_SESSION_NAMESPACE = uuid.UUID("5b0c4f5e-3c55-4f0e-9a0e-6e616e6f736c")
NOTES_CHANGED = "[Notes changed]"
TEAMMATES = "[Teammates]"
TEAMMATES_CHANGED = "[Teammates changed]"
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
    memory: tuple[str, ...] = ()  # the opening's teammates and notes blocks
    notes_changed: tuple[str, ...] = ()
    session: str = ""
    opening: str = ""  # JSON of a rebuilt opening, to store with this turn ("" if kept)
    visible: tuple[int, ...] = ()  # the note ids the turn knows of as it starts
    has_history: bool = False
    # The conversation's edits and deletions so far (``Messages.changes``) as the turn was
    # built: one since means a message it showed may have been deleted as it ran.
    changes: int = 0

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

    def recall(
        self,
        channel: str,
        thread_key: str,
        *,
        persona: str,
        owner_dm: bool,
        teammates: Sequence[Mate] = (),
        members_known: bool = True,
    ) -> Recall:
        """``teammates``: whom the instance may reach now, ``here`` marked from the
        conversation's members (``members_known`` False: the member list could not be read,
        so who is here is taken as the thread last knew it)."""
        mates = tuple(teammates)
        if not self.enabled:
            return Recall(channel, thread_key, system=persona, memory=teammates_block(mates))
        conversation = f"slack:{channel}"
        changes = self.store.messages.changes(self.instance, channel)
        notes = self.store.memories.visible(self.instance, conversation, private=owner_dm)
        rows, not_shown, cut_now = self._window(channel, thread_key)
        session = session_id(self.instance, channel, thread_key)
        opened = _latest_opening(rows)
        if opened is None or cut_now or opened.system != persona:
            block = self.notes_block(notes)
            return Recall(
                channel,
                thread_key,
                history=tuple(_past(row) for row in rows),
                not_shown=not_shown,
                system=persona,
                memory=(*teammates_block(mates), *block),
                session=session,
                opening=Opening(persona, block, mates, mates).to_json(),
                visible=tuple(n.id for n in notes),
                has_history=bool(rows),
                changes=changes,
            )
        if not members_known:
            mates = _here_as_known(mates, opened.known)
        told = teammate_changes(opened.known, mates)
        known = set(rows[-1].notes_known)
        return Recall(
            channel,
            thread_key,
            history=tuple(_past(row) for row in rows),
            not_shown=not_shown,
            system=opened.system,
            memory=(*teammates_block(opened.teammates), *opened.notes),
            notes_changed=(*told, *self._changes(notes, known)),
            session=session,
            # The opening as it was, with the list as the thread now knows it.
            opening=dataclasses.replace(opened, known=mates).to_json() if told else "",
            visible=tuple(n.id for n in notes),
            has_history=True,
            changes=changes,
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
        shown = shown_spans(prompt, turn.transcript)
        gone = self._deleted_since(recall, turn)
        if gone:
            # Deleted as the turn ran: the model read it, the kept history does not.
            prompt, messages, shown = scrub_shown(prompt, messages, shown, gone, DELETED_LINE)
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
            shown=spans_json(shown),
        )

    def _deleted_since(self, recall: Recall, turn: Turn) -> set[str]:
        """The messages the turn showed that were deleted since it was built (their rows
        tombstones; an edit's row gone with its message). One read, and only when the
        conversation had an edit or deletion since."""
        messages = self.store.messages
        if messages.changes(self.instance, recall.channel) == recall.changes:
            return set()
        lines = [line for line in turn.transcript if line.ts]
        statuses = messages.statuses(self.instance, recall.channel, [line.ts for line in lines])
        return {
            line.ts
            for line in lines
            if statuses.get(line.ts) == "deleted"
            or (line.ts not in statuses and line.sender_name.startswith(EDITED_TAG))
        }


@dataclass(frozen=True)
class Opening:
    """A thread's opening as stored with the turn that built it (``agent_history.opening``):
    the system prompt, the notes block and the teammates it listed; ``known``, the teammates
    as the thread was last told of them (the opening's list, then its ``[Teammates changed]``
    lines), kept again with each turn that showed such a line."""

    system: str
    notes: tuple[str, ...]
    teammates: tuple[Mate, ...] = ()
    known: tuple[Mate, ...] = ()

    def to_json(self) -> str:
        data: dict[str, object] = {"system": self.system, "notes": list(self.notes)}
        data["teammates"] = [[m.name, m.role, m.here] for m in self.teammates]
        if self.known != self.teammates:
            data["known"] = [[m.name, m.role, m.here] for m in self.known]
        return json.dumps(data, ensure_ascii=False)


def _latest_opening(rows: Sequence[HistoryRow]) -> Opening | None:
    for row in reversed(rows):
        if row.opening:
            try:
                data = json.loads(row.opening)
                system, notes = data["system"], data["notes"]
                if isinstance(system, str) and isinstance(notes, list):
                    # An opening stored before the teammates were listed has none: the
                    # thread hears of each once, as a change.
                    teammates = _mates(data.get("teammates", []))
                    known = _mates(data["known"]) if "known" in data else teammates
                    return Opening(system, tuple(str(n) for n in notes), teammates, known)
            except (ValueError, KeyError, TypeError):
                pass
            return None  # unreadable: rebuilt with this turn
    return None


def _mates(raw: object) -> tuple[Mate, ...]:
    if not isinstance(raw, list):
        raise TypeError("teammates: expected a list")
    return tuple(Mate(str(name), str(role), bool(here)) for name, role, here in raw)


def teammates_block(mates: Sequence[Mate]) -> tuple[str, ...]:
    """``[Teammates]`` and one line per teammate; nothing when there is none."""
    return (TEAMMATES, *(m.line() for m in mates)) if mates else ()


def teammate_changes(known: Sequence[Mate], now: Sequence[Mate]) -> tuple[str, ...]:
    """What changed since the thread was last told: ``[Teammates changed] + eli — reviewer``
    (new), ``~ eli — QA lead (here)`` (a new role, or in or out of the conversation),
    ``− eli`` (no longer reachable)."""
    before = {m.name: m for m in known}
    after = {m.name for m in now}
    lines = [
        f"{TEAMMATES_CHANGED} {'+' if m.name not in before else '~'} {m.line()}"
        for m in now
        if before.get(m.name) != m
    ]
    lines += [f"{TEAMMATES_CHANGED} − {m.name}" for m in known if m.name not in after]
    return tuple(lines)


def _here_as_known(mates: Sequence[Mate], known: Sequence[Mate]) -> tuple[Mate, ...]:
    """Who is here as the thread last knew it (the conversation's members could not be read)."""
    here = {m.name for m in known if m.here}
    return tuple(dataclasses.replace(m, here=m.name in here) for m in mates)


def shown_spans(prompt: str, transcript: Sequence[Line]) -> list[Span]:
    """Where each message line of ``transcript`` sits in ``prompt`` (``render_prompt``
    writes them in order): what ``agent_history.shown`` keeps."""
    found: list[Span] = []
    at = 0
    for line in transcript:
        if not line.ts:
            continue
        rendered = render_line(line)
        start = prompt.find(rendered, at)
        if start < 0:
            continue
        at = start + len(rendered)
        found.append((line.ts, start, at, len(line.sender_name) + 2))
    return found


def _past(row: HistoryRow) -> PastTurn:
    return PastTurn(prompt=row.prompt, messages=row.messages, posts=row.posts)
