"""A deleted message's files (docs/agents.md, "Edits and deletes"): their rows leave the
store and their downloads the disk, unless another stored message still names the same
file (another instance's copy of the message); the files a handoff passed on leave its
message with the deleted one that shared them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from sqlalchemy import text

from nanoslack.config.files import FileSettings
from nanoslack.edits import MessageChanges
from nanoslack.inbound import DELETED, FileRef, Inbound, InboxKey
from nanoslack.slack.files import FileFetcher
from nanoslack.store import Store
from tests.core.core_helpers import BOT_USER, ROOM, message

BOTH = FileRef("F0BOTH", "both.txt", "text/plain", 1, "https://x/both")
ONLY = FileRef("F0ONLY", "only.txt", "text/plain", 1, "https://x/only")
KEEP = FileRef("F0KEEP", "keep.txt", "text/plain", 1, "https://x/keep")


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


def test_a_deleted_messages_files_leave_the_handoffs_that_passed_them_on_and_their_words_say_so(
    store: Store,
) -> None:
    dana = dataclasses.replace(message(mention=True), files=(BOTH, ONLY))
    eli = dataclasses.replace(dana, instance="eli", files=(BOTH,))
    other = dataclasses.replace(message(mention=True, ts="1700000100.000001"), files=(KEEP,))
    for msg in (dana, eli, other):
        store.messages.add(msg, group_id=None, status="pending")
    # dana's turn handed eli both messages' files: ONLY from the one deleted, KEEP from another.
    words = (
        "[agent] A message just arrived from dana (in Group chat): look\n[file: only.txt]\n[file: keep.txt]"
    )
    ts = store.messages.add_internal(
        instance="eli", channel=ROOM, thread_key=dana.ts, sender_id="slack:bot:B0DANA", text=words, depth=1
    )
    store.message_files.add_refs(instance="eli", channel=ROOM, ts=ts, refs=[ONLY, KEEP])
    passed = InboxKey("eli", ROOM, ts)
    # A turn of eli's was shown the handoff, only.txt's text in its line (its kept copy).
    line = words.replace("[file: only.txt]", "[file: only.txt (9 B)]\nlaunch 44")
    head = "dana: "
    store.history.add(
        instance="eli",
        channel=ROOM,
        thread_key=dana.ts,
        turn_id=1,
        prompt=f"{head}{line}",
        messages=json.dumps([{"role": "user", "content": f"{head}{line}"}]),
        shown=json.dumps([[ts, 0, len(head + line), len(head)]]),
    )

    change = MessageChanges(store, instance="dana", bot_user_id=BOT_USER).apply(_deleted(dana))

    # ONLY's download may go: the handoff no longer names it; BOTH's stays for eli's copy.
    assert change.files_gone == ("F0ONLY",)
    assert store.message_files.of("eli", ROOM, [ts]) == {ts: (KEEP,)}
    row = store.messages.get(passed)
    assert row is not None and row.status == "pending"
    assert row.text.split("\n")[1:] == [
        "[file: only.txt: the file is gone (deleted, or no longer shared)]",
        "[file: keep.txt]",
    ]
    with store.transaction() as conn:
        ((prompt, kept),) = conn.execute(text("SELECT prompt, messages FROM agent_history")).all()
    assert prompt == f"dana: {row.text}"
    assert "launch 44" not in prompt + kept and "the file is gone" in kept
