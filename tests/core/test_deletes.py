"""A deleted message's files (docs/agents.md, "Edits and deletes"): their rows leave the
store and their downloads the disk, unless another stored message still names the same
file (another instance's copy of the message)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from nanoslack.config.files import FileSettings
from nanoslack.edits import MessageChanges
from nanoslack.inbound import DELETED, FileRef, Inbound
from nanoslack.slack.files import FileFetcher
from nanoslack.store import Store
from tests.core.core_helpers import BOT_USER, ROOM, message

BOTH = FileRef("F0BOTH", "both.txt", "text/plain", 1, "https://x/both")
ONLY = FileRef("F0ONLY", "only.txt", "text/plain", 1, "https://x/only")


def _deleted(msg: Inbound) -> Inbound:
    """Slack's ``message_deleted`` of ``msg``, as the instance ``msg`` was stored for gets it."""
    return dataclasses.replace(
        msg, ts=f"{float(msg.ts) + 1:.6f}", subtype=DELETED, item_ts=msg.ts, text="", files=()
    )


def test_a_deleted_messages_files_leave_the_store_and_the_disk_unless_another_message_names_them(
    store: Store, tmp_path: Path
) -> None:
    dana = dataclasses.replace(message(mention=True), files=(BOTH, ONLY))
    eli = dataclasses.replace(dana, instance="eli", files=(BOTH,))
    for msg in (dana, eli):
        store.messages.add(msg, group_id=None, status="pending")
    folder = tmp_path / "files"
    folder.mkdir()
    fetcher = FileFetcher(FileSettings(folder=folder), api_url="https://slack.com/api/")
    for ref in (BOTH, ONLY):
        (folder / ref.id).write_bytes(b"x")

    first = MessageChanges(store, instance="dana", bot_user_id=BOT_USER).apply(_deleted(dana))
    fetcher.discard(first.files_gone)

    assert first.files_gone == ("F0ONLY",)
    assert store.message_files.of("dana", ROOM, [dana.ts]) == {}
    assert sorted(p.name for p in folder.iterdir()) == ["F0BOTH"]  # eli's message still names it

    last = MessageChanges(store, instance="eli", bot_user_id="U0ELI").apply(_deleted(eli))
    fetcher.discard(last.files_gone)

    assert last.files_gone == ("F0BOTH",)
    assert store.message_files.of("eli", ROOM, [eli.ts]) == {}
    assert list(folder.iterdir()) == []
