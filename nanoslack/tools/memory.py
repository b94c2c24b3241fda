"""The note tools (docs/memory.md): ``remember(text, scope)``, ``forget(id)``, ``recall(query)``.

Scopes: ``self`` (the agent's own notes, shown in every turn it takes; the default),
``private`` (shown only in its DMs with an owner), ``room`` (shown to every instance of
the fleet in this conversation). Who may write what: ``self`` and ``private`` notes only
in a turn whose every message comes from the instance's owners, the lead of the ``chain``
room it works in, or its own routine; ``room`` notes only in a turn whose every message
comes from a person, that lead, or a routine. Another bot or a stranger must not plant
lasting instructions in an agent, nor a bot in every agent of a room.

Like every host tool, a call commits nothing: ``remember`` writes a *draft* (so it can
answer with the note's id) that the turn's recording transaction keeps (``Notes.apply``);
a turn lost to a crash leaves only a draft nobody sees, and its re-run writes the note
once. ``forget`` takes effect the same way. ``recall`` sees the turn's own drafts: a note
remembered a moment ago is found in the same turn.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from nanoslack.agents import ToolResult, Turn
from nanoslack.agents.tool import Arguments, Tool
from nanoslack.config.memory import NOTE_CHARS, MemorySettings
from nanoslack.store import MessageRow, NoteRow, Store
from nanoslack.store.memories import SCOPES, parse_ref
from nanoslack.tools.host import TurnEffects

REMEMBER = "remember"
FORGET = "forget"
RECALL = "recall"
RECALL_LIMIT = 20
# ``asked_by`` of a note an operator wrote (``nanoslack notes``); a note written by a turn no
# message woke names that turn's origin, "<kind>:<name>" (a routine's run: "routine:<name>").
OPERATOR = "operator"


def asker_label(asked_by: str) -> str | None:
    """How a note's line names who asked for it when that was no person: "an operator", or
    the origin of a turn no message woke ("the routine daily-plan"); None for a person."""
    if asked_by == OPERATOR:
        return "an operator"
    kind, sep, name = asked_by.partition(":")
    return f"the {kind} {name}" if sep and kind != "slack" else None


class Remember(Arguments):
    text: str = Field(description="The note, self-contained.")
    # A string checked by ``remember`` (any case), offered as the enum of the scopes.
    scope: str = Field(
        "self", description="Who sees it (default self).", json_schema_extra={"enum": list(SCOPES)}
    )


class Forget(Arguments):
    id: str = Field(description="The note's id, e.g. m12.")


class Recall(Arguments):
    query: str = Field(description="Words the note must hold.")


REMEMBER_DESCRIPTION = (
    "Keep a short note for your future turns (at most 500 characters). scope self (default): your own "
    "notes, shown in every conversation; private: shown only in your direct messages with your owners; "
    "room: shown to every agent in this conversation. Only your owners can ask you to keep self or "
    "private notes. Returns the note's id (m12)."
)
FORGET_DESCRIPTION = "Remove one of your notes (or one of this room's) by its id, e.g. m12."
RECALL_DESCRIPTION = "Search the notes you can see here: those holding every word of the query, newest first."


@dataclass(frozen=True, slots=True)
class NoteWritten:
    note_id: int


@dataclass(frozen=True, slots=True)
class NoteForgotten:
    note_id: int


@dataclass(frozen=True)
class NoteChanges:
    """What a turn itself did to notes: known to its thread without a ``[Notes changed]`` line."""

    written: tuple[int, ...] = ()
    forgotten: tuple[int, ...] = ()


def note_changes(effects: TurnEffects) -> NoteChanges:
    return NoteChanges(
        written=tuple(a.note_id for a in effects.acts if isinstance(a, NoteWritten)),
        forgotten=tuple(a.note_id for a in effects.acts if isinstance(a, NoteForgotten)),
    )


@dataclass(frozen=True)
class NoteContext:
    """Who the turn is and who woke it, for the write rule."""

    instance: str
    channel: str
    is_dm: bool
    owner_dm: bool  # a DM with an owner: private notes are visible
    trusted: bool  # every message from an owner, the chain room's lead or its own routine
    # every message from a person (no bot, no handoff), the chain room's lead, or a routine
    room_writer: bool
    asked_by: str  # users.id of the waking message's sender


class MemoryTools:
    """One turn's note tools (``tools()``: a list of ``agents.tool.Tool``)."""

    def __init__(
        self, ctx: NoteContext, store: Store, settings: MemorySettings, turn_id: int, effects: TurnEffects
    ) -> None:
        self._ctx = ctx
        self._store = store
        self._settings = settings
        self._turn_id = turn_id
        self._effects = effects

    @property
    def _conversation(self) -> str:
        return f"slack:{self._ctx.channel}"

    def tools(self) -> list[Tool[Any]]:
        return [
            Tool(REMEMBER, REMEMBER_DESCRIPTION, Remember, self._remember),
            Tool(FORGET, FORGET_DESCRIPTION, Forget, self._forget),
            Tool(RECALL, RECALL_DESCRIPTION, Recall, self._recall),
        ]

    async def _remember(self, args: Remember) -> ToolResult:
        text, scope = args.text.strip(), (args.scope.strip() or "self").lower()
        refusal = self._write_refusal(text, scope)
        if refusal is not None:
            return ToolResult(refusal, is_error=True)
        note_id = self._store.memories.add(
            instance=self._ctx.instance,
            scope=scope,
            text=text,
            asked_by=self._ctx.asked_by,
            conversation=self._conversation,
            turn_id=self._turn_id,
            draft=True,
        )
        self._effects.acts.append(NoteWritten(note_id))
        return ToolResult(f"remembered as m{note_id} ({scope} note, from your next turn on)")

    def _write_refusal(self, text: str, scope: str) -> str | None:
        if scope not in SCOPES:
            return f"not remembered: unknown scope {scope!r}; the scopes are self, private and room"
        if not text:
            return "not remembered: the text is empty"
        if len(text) > NOTE_CHARS:
            return f"not remembered: a note is at most {NOTE_CHARS} characters (this one has {len(text)})"
        if scope != "room" and not self._ctx.trusted:
            return (
                "not remembered: only your owners can ask you to remember something for yourself "
                "(self or private notes); room notes (scope room) are open to the people of this conversation"
            )
        if scope == "room" and not self._ctx.room_writer:
            return (
                "not remembered: room notes are kept only when a person of this conversation asks "
                "(or the chain's lead, or a routine); another agent cannot leave notes for the room"
            )
        held = self._store.memories.in_scope(
            instance=self._ctx.instance, scope=scope, conversation=self._conversation, turn_id=self._turn_id
        )
        used = sum(chars for _, chars in held)
        cap = self._settings.memory_chars
        if used + len(text) > cap:
            oldest = ", ".join(f"m{note_id}" for note_id, _ in held[:3]) or "none"
            return (
                f"not remembered: the {scope} notes hold {used:,} of {cap:,} characters and this note has "
                f"{len(text)}; forget some first (the oldest: {oldest})"
            )
        return None

    async def _forget(self, args: Forget) -> ToolResult:
        ref = args.id
        note_id = parse_ref(ref)
        if note_id is None:
            return ToolResult(
                f"nothing forgotten: {ref!r} is not a note id (they look like m12)", is_error=True
            )
        note = self._mine(note_id)
        if note is None:
            return ToolResult(
                f"nothing forgotten: no note m{note_id} among yours or this room's", is_error=True
            )
        if note.scope != "room" and not self._ctx.trusted:
            return ToolResult(
                "nothing forgotten: only your owners can ask you to forget your own notes", is_error=True
            )
        if any(isinstance(a, NoteForgotten) and a.note_id == note_id for a in self._effects.acts):
            return ToolResult(f"m{note_id} is forgotten already (from your next turn on)")
        self._effects.acts.append(NoteForgotten(note_id))
        return ToolResult(f"forgot m{note_id} (from your next turn on)")

    def _mine(self, note_id: int) -> NoteRow | None:
        drafts = {a.note_id for a in self._effects.acts if isinstance(a, NoteWritten)}
        if note_id in drafts:
            return NoteRow(
                note_id, self._ctx.instance, "room", self._conversation, "", "", self._turn_id, "draft", 0.0
            )
        note = self._store.memories.get(note_id)
        if note is None:
            return None
        if note.scope == "room":
            return note if note.conversation == self._conversation else None
        return note if note.instance == self._ctx.instance else None

    async def _recall(self, args: Recall) -> ToolResult:
        query = args.query
        words = query.lower().split()
        forgotten = set(note_changes(self._effects).forgotten)
        notes = self._store.memories.visible(
            self._ctx.instance, self._conversation, private=self._ctx.owner_dm, turn_id=self._turn_id
        )
        notes = [n for n in notes if n.id not in forgotten]
        found = [n for n in notes if all(w in n.text.lower() for w in words)][:RECALL_LIMIT]
        if not found:
            return ToolResult(f"no note holds {query!r}" if words else "you have no notes here")
        return ToolResult("\n".join(_line(n) for n in found))


def _is_person(msg: MessageRow) -> bool:
    """A person's own message heard in Slack (``slack:U…``): no bot's, no handoff, no fleet brief."""
    sender = msg.sender_id
    return not msg.internal and sender.startswith("slack:") and not sender.startswith("slack:bot:")


def _line(note: NoteRow) -> str:
    day = time.strftime("%Y-%m-%d", time.gmtime(note.created_at))
    return f"{note.ref} ({note.scope}, {day}): {note.text}"


@dataclass(frozen=True)
class Notes:
    """Builds each turn's note tools for one instance, and commits what they did."""

    instance: str
    store: Store
    settings: MemorySettings
    owners: tuple[str, ...]
    # A fleet instance run by this process as its messages name it (``slack:bot:B…``),
    # None for one run elsewhere: a chain room's lead is trusted only when it runs here.
    bot_sender: Callable[[str], str | None] = lambda _instance: None

    def lead_of(self, channel: str) -> str | None:
        """The users.id of a chain room's lead (None elsewhere, or when another process
        runs the lead), for the write rule."""
        room = self.store.room_kinds.get(channel)
        if room.kind != "chain" or not room.lead:
            return None
        return self.bot_sender(room.lead)

    def tools(
        self, turn_id: int, turn: Turn, msgs: Sequence[MessageRow], effects: TurnEffects
    ) -> list[Tool[Any]]:
        return MemoryTools(self.context(turn, msgs), self.store, self.settings, turn_id, effects).tools()

    def context(self, turn: Turn, msgs: Sequence[MessageRow]) -> NoteContext:
        owners = {f"slack:{owner}" for owner in self.owners}
        lead = self.lead_of(turn.channel) if turn.thread_ts else None
        trusted_senders = owners | ({lead} if lead else set())
        is_dm = not turn.thread_ts
        if turn.origin is not None:  # the instance's own scheduled work: its owner set it up
            origin = turn.origin.conversation
            return NoteContext(self.instance, turn.channel, is_dm, is_dm, True, True, origin)
        return NoteContext(
            instance=self.instance,
            channel=turn.channel,
            is_dm=is_dm,
            owner_dm=is_dm and any(m.sender_id in owners for m in msgs),
            trusted=bool(msgs) and all(m.sender_id in trusted_senders for m in msgs),
            room_writer=bool(msgs) and all(_is_person(m) or m.sender_id == lead for m in msgs),
            asked_by=msgs[-1].sender_id if msgs else turn.sender_id,
        )

    def apply(self, turn_id: int, turn: Turn, effects: TurnEffects) -> None:
        """Inside the turn's transaction: its drafts become notes, its forgets take effect."""
        changes = note_changes(effects)
        if changes.written:
            self.store.memories.keep(turn_id)
        if changes.forgotten:
            self.store.memories.delete(changes.forgotten)
