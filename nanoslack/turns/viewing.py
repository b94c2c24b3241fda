"""What a DM turn is told about the assistant pane (a ``TurnNotes`` provider): the channel
the person was viewing when they opened the instance's pane or last switched channels with
it open (docs/agent-surface.md)."""

from __future__ import annotations

from collections.abc import Sequence

from nanoslack.inbound import ThreadKey
from nanoslack.store import MessageRow, Store
from nanoslack.turns.transcript import TurnNotes


def viewing_notes(store: Store) -> TurnNotes:
    def notes(instance: str, key: ThreadKey, msgs: Sequence[MessageRow]) -> Sequence[str]:
        if key.thread_key:
            return ()  # a room: the pane lives in DMs
        viewing = store.assistant_threads.viewing(instance, key.channel)
        if viewing is None:
            return ()
        return (f"[Viewing #{viewing.name}]" if viewing.name else f"[Viewing <#{viewing.channel}>]",)

    return notes
