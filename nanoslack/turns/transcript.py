"""What one turn shows the agent (docs/agents.md): the ``Turn`` it runs on.

What it already saw and did in the thread comes first (``turns.history``: its earlier
turns, replayed; its notes). Then the new part: the thread since this instance's last
turn there, oldest first, up to the newest message the turn answers (``through_ts``)
and no further: what the agent is shown and what the turn consumes are the same
messages, so a message that arrives while the turn waits for a slot is answered by the
next turn, once; and one it answers is shown even when it is older than the thread's
last turn (recorded late, after a later message there had its turn: a redelivery after
a kill or a dropped socket). Room context is included, held and refused messages never;
the instance's own earlier posts too (sent or still queued) while the thread has no
history of its turns; people are named (``<@U…>`` → ``@name``). A transcript holds at most
``MAX_MESSAGES`` messages and ``MAX_CHARS`` characters, the newest kept: a thread of
pasted logs must not overflow the model's context and fail every turn there.

No Slack client here: names of room members come through ``RoomDirectory``, which
the edge implements.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from nanoslack import mrkdwn
from nanoslack.agents import Line, SeenFile, Teammate, Turn, TurnOrigin
from nanoslack.agents.prompt import DELETED_LINE, EDITED_TAG
from nanoslack.agents.teammates import Mate, Roster, TeammateSource
from nanoslack.config.memory import DEFAULT_HISTORY_CHARS
from nanoslack.inbound import FLEET_SENDER, FileRef, Identity, ThreadKey, bot_sender_id
from nanoslack.store import MessageRow, Store
from nanoslack.turns.files import FileSource, seen_files
from nanoslack.turns.history import Recall, ThreadMemory

MAX_MESSAGES = 100
MAX_CHARS = 24_000
CUT_NOTE = " … [cut]"


# Lines a room adds to a turn's prompt (the room features' notes, the open votes), given the turn's
# thread and the messages it answers.
TurnNotes = Callable[[str, "ThreadKey", Sequence[MessageRow]], Sequence[str]]


class RoomDirectory(Protocol):
    """What the edge knows about a conversation's people."""

    async def member_names(self, channel: str) -> tuple[str, ...]: ...

    def name_of_user(self, slack_user_id: str) -> str | None: ...


class Transcripts:
    def __init__(
        self,
        *,
        identity: Identity,
        store: Store,
        teammate: Teammate | TeammateSource,
        skills_dir: Path,
        directory: RoomDirectory,
        notes: Sequence[TurnNotes] = (),
        history_chars: int = DEFAULT_HISTORY_CHARS,
        owners: Sequence[str] = (),
        remembers: bool = True,
        files: FileSource | None = None,
        roster: Roster | None = None,
    ) -> None:
        self.instance = identity.instance
        self._me = bot_sender_id(identity.bot_id) if identity.bot_id else identity.instance
        self._store = store
        self._teammate = teammate
        self._skills_dir = skills_dir
        self._directory = directory
        # The teammates the opening lists (``[Teammates]``, docs/agents.md); none when unset.
        self._roster = roster
        self.notes = list(notes)
        self._owners = tuple(owners)
        self._owner_ids = frozenset(f"slack:{owner}" for owner in owners)
        # The edge's downloads (docs/agents.md "Files"); None: files stay ``[file: name]``.
        self._files = files
        self.memory = ThreadMemory(
            identity.instance,
            store,
            history_chars,
            name_of=self._name,
            enabled=remembers,
        )

    def _persona(self) -> str:
        """The system prompt from the teammate's files as they are now (an edit applies
        from the next turn: ``TeammateSource``)."""
        mate = self._teammate
        return (mate.get() if isinstance(mate, TeammateSource) else mate).system_prompt(self._skills_dir)

    async def build(self, key: ThreadKey, msgs: Sequence[MessageRow]) -> tuple[Turn, Recall]:
        """The turn that answers ``msgs`` (this thread's pending messages, oldest first),
        after what the agent already saw and did in the thread (``Recall``)."""
        members = await self._directory.member_names(key.channel)
        recall = self.memory.recall(
            key.channel,
            key.thread_key,
            persona=self._persona(),
            owner_dm=not key.thread_key and any(m.sender_id in self._owner_ids for m in msgs),
            teammates=self._mates(members),
            members_known=bool(members),
        )
        since = self._store.turns.last_through(self.instance, key.channel, key.thread_key)
        through = msgs[-1].ts
        rows = self._store.messages.thread(
            self.instance, key.channel, key.thread_key, since, until=through, limit=MAX_MESSAGES
        )
        # Counted only when the read hit its limit: a thread that fits has nothing more
        # to count, and the count was a third of a short turn's reads (the bench's figure).
        older = (
            self._store.messages.thread_count(
                self.instance, key.channel, key.thread_key, since, until=through
            )
            if len(rows) >= MAX_MESSAGES
            else len(rows)
        )
        reply_thread = key.thread_key  # the waking message's thread; "" in a DM
        transcript = [self._line(row) for row in with_late(rows, msgs, since)]
        if not recall.has_history:
            # With a history its own posts are in its replayed turns, as the tool calls
            # that made them: shown once, not again as lines of the thread.
            transcript += self._own_posts(key, reply_thread, since)
            if key.thread_key and since is None and (not rows or rows[0].ts != key.thread_key):
                transcript += self._own_root(key)
            transcript.sort(key=lambda line: float(line.ts or 0))
            # Not in Slack yet, so they will land after everything stored so far.
            transcript += self._unsent_posts(key, reply_thread)
        # The files of the messages it answers, after the bound: each is bounded on its own.
        kept, files = await self._with_files(key, msgs, fit(transcript))
        room = self._store.room_kinds.get(key.channel) if key.thread_key else None
        turn = Turn(
            instance=self.instance,
            # The instance name, not Slack's display name: it is what siblings write
            # as @name and what replies.link_mentions turns into a real mention.
            name=self.instance,
            channel=key.channel,
            thread_ts=reply_thread,
            sender_id=msgs[-1].sender_id,
            wrapping_up=any(m.hop_limit > 0 and m.hop >= m.hop_limit for m in msgs),
            room=room_label(key),
            members=members,
            transcript=tuple(kept),
            system=recall.system,
            earlier_not_shown=max(0, older - len(rows)) + len(transcript) - len(kept),
            mission=room.mission or "" if room else "",
            notes=(
                *self._reactions(key, since, through),
                *(line for note in self.notes for line in note(self.instance, key, msgs)),
            ),
            files=tuple(files),
        )
        return recall.apply(turn), recall

    async def _with_files(
        self, key: ThreadKey, msgs: Sequence[MessageRow], lines: list[Line]
    ) -> tuple[list[Line], list[SeenFile]]:
        """The files of the messages the turn answers, downloaded now (after the inbox
        recorded them, never on the ack path) and shown in place of their ``[file: name]``
        words; the lines of other messages keep those words (docs/agents.md "Files")."""
        if self._files is None:
            return lines, []
        refs = self._store.message_files.of(self.instance, key.channel, [m.ts for m in msgs])
        if not refs:
            return lines, []
        shown: list[SeenFile] = []
        out: list[Line] = []
        for line in lines:
            mine = refs.get(line.ts)
            if not mine:
                out.append(line)
                continue
            seen = await seen_files(self._files, mine, instance=self.instance, chars=self._files.chars)
            shown += seen
            out.append(dataclasses.replace(line, text=with_files(line.text, mine, seen)))
        return out, shown

    async def build_sourced(self, origin: TurnOrigin, room: str, text: str) -> tuple[Turn, Recall]:
        """A turn no message woke (a scheduled run, docs/architecture.md): ``text`` from the
        fleet as what woke it; its posts start a thread of their own in ``room`` (``thread_ts``
        empty), or go to the owners' DMs when ``room`` is "". Its turns are a conversation of
        their own (``origin.conversation``): each sees the earlier ones."""
        if not room:
            members = tuple(self._directory.name_of_user(o) or o for o in self._owners)
            channel, room_name, mission = "", "DM", ""
        else:
            channel = room
            members = await self._directory.member_names(channel)
            settings = self._store.room_kinds.get(channel)
            room_name, mission = "Group chat", (settings.mission or "" if settings else "")
        recall = self.memory.recall(
            origin.conversation,
            "",
            persona=self._persona(),
            owner_dm=not room,
            teammates=self._mates(members),
            members_known=bool(members) or not room,
        )
        turn = Turn(
            instance=self.instance,
            name=self.instance,
            channel=channel,
            thread_ts="",
            sender_id=FLEET_SENDER,
            wrapping_up=False,
            room=room_name,
            members=members,
            transcript=(
                Line(ts="", sender_id=FLEET_SENDER, sender_name=origin.kind, text=text, handoff=True),
            ),
            system=recall.system,
            mission=mission,
            origin=origin,
        )
        return recall.apply(turn), recall

    def build_asked(
        self,
        *,
        asker: str,
        sender_id: str,
        channel: str,
        thread_key: str,
        question: str,
        files: tuple[SeenFile, ...] = (),
    ) -> tuple[Turn, Recall]:
        """A teammate's ask (docs/agents.md "Asking a teammate"): the question (with the files
        it passed on) is all it is shown of the asker's conversation, after its own persona and
        notes; nothing of the thread the asker is in. Each ask is a conversation of its own
        (``thread_key``), so no ask replays another."""
        recall = self.memory.recall(
            channel,
            thread_key,
            persona=self._persona(),
            owner_dm=False,
            teammates=self._mates((asker,)),  # the asker is the one here
        )
        turn = Turn(
            instance=self.instance,
            name=self.instance,
            channel=channel,
            thread_ts="",
            sender_id=sender_id,
            wrapping_up=False,
            room="Private question",
            members=(asker,),
            transcript=(Line(ts="", sender_id=sender_id, sender_name=asker, text=question),),
            system=recall.system,
            files=files,
            asked_by=asker,
        )
        return recall.apply(turn), recall

    def _mates(self, members: Sequence[str]) -> tuple[Mate, ...]:
        return self._roster.mates(members) if self._roster is not None else ()

    def _reactions(self, key: ThreadKey, since: str | None, through: str) -> list[str]:
        """People's reactions to this instance's posts in the thread since its last turn
        there (docs/agents.md)."""
        rows = self._store.reactions.in_thread(self.instance, key.channel, key.thread_key, since, through)
        return [
            f"[reactions] {self._directory.name_of_user(r.user_id) or r.user_id} :{r.emoji}: "
            f'on your message "{r.excerpt}"'
            for r in rows
        ]

    def _line(self, row: MessageRow) -> Line:
        name = self._name(row.sender_id)
        if row.status == "deleted":  # its words are gone; that it was there is not (docs/agents.md)
            return Line(ts=row.ts, sender_id=row.sender_id, sender_name=name, text=DELETED_LINE)
        return Line(
            ts=row.ts,
            sender_id=row.sender_id,
            # An edit made after a turn was shown the message: "[edited] ana: <new text>".
            sender_name=f"{EDITED_TAG} {name}" if row.edit_of else name,
            text=self._readable(row.text),
            handoff=row.internal,
        )

    def _own_posts(self, key: ThreadKey, reply_thread: str, since: str | None) -> list[Line]:
        return [
            Line(ts=ts, sender_id=self._me, sender_name=self.instance, text=self._readable(text))
            for ts, text in self._store.outbox.sent_posts(self.instance, key.channel, reply_thread, since)
        ]

    def _own_root(self, key: ThreadKey) -> list[Line]:
        """A thread this instance started (a sourced turn's post): its root is not a stored
        message, so the thread's first turn is shown it from the outbox."""
        text = self._store.outbox.own_root(self.instance, key.channel, key.thread_key)
        if text is None:
            return []
        return [
            Line(ts=key.thread_key, sender_id=self._me, sender_name=self.instance, text=self._readable(text))
        ]

    def _unsent_posts(self, key: ThreadKey, reply_thread: str) -> list[Line]:
        return [
            Line(ts="", sender_id=self._me, sender_name=self.instance, text=self._readable(text))
            for text in self._store.outbox.unsent_replies(self.instance, key.channel, reply_thread)
        ]

    def _name(self, sender_id: str) -> str:
        user = self._store.users.get(sender_id)
        if user is not None and user.display_name:
            return user.display_name
        return sender_id.removeprefix("slack:bot:").removeprefix("slack:")

    def _readable(self, text: str) -> str:
        """``<@U0ELI>`` → ``@eli``: the agent addresses people by name."""
        return mrkdwn.readable(text, self._directory.name_of_user)


def with_late(rows: Sequence[MessageRow], msgs: Sequence[MessageRow], since: str | None) -> list[MessageRow]:
    """The thread since the last turn, plus the messages this turn answers that are older
    than that turn's ``through_ts``, in ts order. Such a message was recorded late: Slack
    redelivered it (a dropped socket, a kill before the inbox commit) after a later message
    of its thread had its turn. The turn consumes it, so it must be shown it."""
    late = [m for m in msgs if since is not None and m.ts <= since]
    return sorted([*late, *rows], key=lambda row: float(row.ts)) if late else list(rows)


def with_files(text: str, refs: Sequence[FileRef], seen: Sequence[SeenFile]) -> str:
    """A message's text with each file's ``[file: name]`` line replaced by what the turn
    is shown of it (appended when the words are not there)."""
    rows = text.split("\n")
    extra: list[str] = []
    for ref, file in zip(refs, seen, strict=False):
        try:
            rows[rows.index(ref.label)] = file.shown
        except ValueError:
            extra.append(file.shown)
    return "\n".join([*rows, *extra])


def room_label(key: ThreadKey) -> str:
    """How the prompt names the conversation: a model reads words, not channel ids (the
    header goes on with its members, the next line with the room's mission)."""
    return "DM" if not key.thread_key else "Group chat"


def fit(lines: list[Line], limit: int = MAX_CHARS) -> list[Line]:
    """The newest lines that fit in ``limit`` characters (the newest one always, cut if
    it alone is longer), oldest first."""
    kept: list[Line] = []
    room = limit
    for line in reversed(lines):
        size = len(line.sender_name) + len(line.text) + 2
        if size > room:
            if not kept:  # the message the turn answers: shown, cut to fit
                text = line.text[: max(0, room - len(line.sender_name) - 2 - len(CUT_NOTE))] + CUT_NOTE
                kept.append(dataclasses.replace(line, text=text))
            break
        kept.append(line)
        room -= size
    kept.reverse()
    return kept
