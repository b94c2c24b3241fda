"""Edits and deletes (docs/agents.md, "Edits and deletes"): what a change to a message
already posted does, before the guard and in the pipeline's transaction.

- An edit of a message no turn has been shown yet replaces its stored text: the turn that
  answers it shows the newest words. A turn under way keeps what it read; the edit is
  then news for the thread's next turn, like an edit after the answer.
- An edit of a message a turn was shown becomes a row of its own at the edit's ts
  (``messages.edit_of``), room context that the thread's next turn shows as
  ``[edited] <name>: <new text>``. It wakes a turn only when the edit newly names the
  instance: then it is routed as a mention would be (guard, router, gate).
- A deleted message's row stays as a tombstone (its ts keeps its place; its text, its
  edits' rows, its files (their rows, the refs to them in the messages the fleet wrote
  that passed them on, whose words then say the file is gone, and their downloads unless
  another stored message names the same file), the words in its inbox entries and its
  lines in the agent's kept history of the turns that were shown it go): never answered,
  shown to later turns as ``[a message was deleted]``. A deleted thread parent leaves its thread as it
  is: the replies stay, and are answered, as Slack keeps them.
- A bot's edit or deletion never reaches the guard: no hop is counted and nothing wakes.
  An edit of a bot's post no turn was shown replaces its text (a teammate's stream that
  finished); later ones are not news (no ``[edited]`` line for a bot).

Redelivery is harmless: each edit has its own event ts, the inbox's key, so a retry is a
duplicate there; applying the same edit twice writes the same text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from nanoslack.agents.prompt import DELETED_LINE
from nanoslack.inbound import DELETED, FileRef, Inbound, InboxKey, file_gone_label, file_label
from nanoslack.logs import get_logger
from nanoslack.store import Store
from nanoslack.store.files import Copy

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Change:
    """What the change did; ``route``: a message to route as a new one (guard, router,
    gate), whose stored row is then the edit of ``edit_of`` when that is set."""

    status: Literal["processed", "dropped"]
    reason: str
    route: Inbound | None = None
    edit_of: str | None = None
    # A deleted message's files no stored message names any more: their downloads go
    # once the change is committed (``Pipeline``).
    files_gone: tuple[str, ...] = ()


class MessageChanges:
    def __init__(self, store: Store, *, instance: str, bot_user_id: str) -> None:
        self._store = store
        self.instance = instance
        self.bot_user_id = bot_user_id

    def apply(self, msg: Inbound) -> Change:
        key = InboxKey(self.instance, msg.channel, str(msg.item_ts))
        change = self._delete(msg, key) if msg.subtype == DELETED else self._edit(msg, key)
        log.info(
            "message change",
            instance=self.instance,
            channel=msg.channel,
            ts=key.ts,
            kind=msg.subtype,
            status=change.status,
            reason=change.reason,
        )
        return change

    def _delete(self, msg: Inbound, key: InboxKey) -> Change:
        store = self._store
        row = store.messages.get(key)
        # Its edits' rows go with it, and the files any of them carried.
        rows = [key.ts, *store.messages.edits_of(key)]
        files = tuple(
            dict.fromkeys(i for ts in rows for i in store.message_files.drop(key.instance, key.channel, ts))
        )
        # The copies the fleet made of its files (a handoff passed them on) go with it too.
        for copy in store.message_files.drop_copies(key.channel, files):
            self._file_gone(key.channel, copy)
        gone = store.message_files.unnamed(files)
        if row is not None:
            # What the turns that were shown it keep of it: its line says it was deleted.
            store.history.scrub(key.instance, key.channel, row.thread_key, rows, DELETED_LINE)
        stored = store.messages.tombstone(key)
        store.inbox.scrub(key)
        if not stored:
            return Change("dropped", "deleted message not stored", files_gone=gone)
        return Change("processed", "message deleted", files_gone=gone)

    def _file_gone(self, channel: str, copy: Copy) -> None:
        """A message the fleet wrote (a handoff) passed on files whose share was deleted: its
        words say each is gone where they named it, for the turn that answers it (one being
        built is built again: ``set_text`` counts a change) and in what the turns that were
        shown it keep."""
        key = InboxKey(copy.instance, channel, copy.ts)
        row = self._store.messages.get(key)
        if row is None or row.status == "deleted":
            return
        text = _without_files(row.text, copy.dropped)
        self._store.messages.set_text(key, text)
        self._store.history.scrub(copy.instance, channel, row.thread_key, [copy.ts], text)
        log.info(
            "passed file gone",
            instance=copy.instance,
            channel=channel,
            ts=copy.ts,
            files=[ref.id for ref in copy.dropped],
            reason="the message that shared it was deleted",
        )

    def _edit(self, msg: Inbound, key: InboxKey) -> Change:
        messages = self._store.messages
        row = messages.get(key)
        if row is not None and row.status == "deleted":
            return Change("dropped", "edit of a deleted message")
        thread_key = row.thread_key if row is not None else _thread_of(msg)
        shown = row is not None and self._store.turns.shown(self.instance, msg.channel, thread_key, key.ts)
        if msg.is_bot:
            if row is not None and not shown:
                messages.set_text(key, msg.text)
                return Change("processed", "bot edit applied before its turn")
            return Change("dropped", "bot edit ignored")
        named = self.bot_user_id in msg.newly_named
        if row is None:
            # Never stored here (it came before the instance heard the room, or was dropped):
            # only a mention the edit adds makes it ours.
            if named:
                return Change("processed", "edit names us", route=_as_message(msg))
            return Change("dropped", "edit of a message not stored")
        if not shown:
            if named and row.status == "context":
                # Now addressed to us: routed again, with its new words, as a mention is.
                messages.forget(key)
                return Change("processed", "edit names us", route=_as_message(msg))
            messages.set_text(key, msg.text)
            return Change("processed", "edit applied before its turn")
        messages.set_text(key, msg.text)
        edit = _as_edit(msg, thread_key)
        if named:
            return Change("processed", "edit names us", route=edit, edit_of=key.ts)
        messages.add(edit, group_id=row.messaging_group_id, status="context")
        messages.mark_edit(edit.key, key.ts)
        return Change("processed", "edit noted for the next turn")


def _without_files(text: str, refs: Sequence[FileRef]) -> str:
    """``text`` with each file's ``[file: name]`` line saying the file is gone (the line
    added when the words do not name it)."""
    lines = text.split("\n")
    for ref in refs:
        # A handoff names a file Slack gave no name by its id (``SeenFile.name``).
        named = [i for i, line in enumerate(lines) if line in (ref.label, file_label(ref.name or ref.id))]
        gone = file_gone_label(ref.name or ref.id)
        if named:
            lines[named[0]] = gone
        else:
            lines.append(gone)
    return "\n".join(lines)


def _thread_of(msg: Inbound) -> str:
    """The edited message's thread: its parent's ts, its own when it is a thread's root, "" in a DM."""
    return "" if msg.is_dm else (msg.thread_ts or str(msg.item_ts))


def _as_message(msg: Inbound) -> Inbound:
    """The edited message itself, with its new words: routed as if it came now."""
    return dataclasses.replace(msg, ts=str(msg.item_ts), subtype=None, item_ts=None, previous_mentions=())


def _as_edit(msg: Inbound, thread_key: str) -> Inbound:
    """The edit as a message of the edited one's thread, at the edit's own ts."""
    return dataclasses.replace(
        msg, subtype=None, item_ts=None, previous_mentions=(), thread_ts=thread_key or None
    )
