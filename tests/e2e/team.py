"""What the team-room tests share (docs/team-rooms.md): a room of alice, dana, eli and fay opened as
``open-room --public --kind …`` leaves it in the store, the instances' rules files, and
reading the room back from the emulator (the board message, a thread, a vote's buttons).

Time is moved, not waited for: a test that needs a task silent for 30 minutes, or a vote
past its reminder, sets the row's clock back in SQL (``age_*``), as an operator could;
the fleet's clock notices on its next look (every second).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nanoslack.emulator import Emulator
from nanoslack.store import Store, sqlite_url
from nanoslack.testing.fleet_env import sql

BOARD_TITLE = "📋 *Task board*"
BOARD_EMPTY = "📋 *Task board* · nothing open right now"


def open_team_room(
    db: Path, channel: str, instances: list[str], *, kind: str = "mention", lead: str | None = None
) -> None:
    """The room as ``open-room --public --kind KIND --lead LEAD`` leaves it in the store."""
    db.parent.mkdir(parents=True, exist_ok=True)
    with Store.open(sqlite_url(str(db))) as store:
        for name in instances:
            store.groups.ensure_public_room(f"slack:{channel}", name)
        store.room_kinds.set(channel, kind=kind, lead=lead, members=tuple(instances))


def rules_env(folder: Path, name: str, rules: list[dict[str, Any]]) -> dict[str, str]:
    path = folder / f"{name}-rules.json"
    path.write_text(json.dumps({"rules": rules, "default": None}))
    return {f"NANOSLACK_AGENT_SCRIPT_{name.upper()}": str(path)}


def thread(emu: Emulator, channel: str, ts: str) -> list[dict[str, Any]]:
    for top in emu.conversation_messages(channel):
        if top["ts"] == ts:
            return list(top["replies"])
    return []


def thread_texts(emu: Emulator, channel: str, ts: str, prefix: str = "") -> list[str]:
    return [m["text"] for m in thread(emu, channel, ts) if m["text"].startswith(prefix)]


def boards(emu: Emulator, channel: str) -> list[dict[str, Any]]:
    """The room's board messages (there must only ever be one)."""
    return [m for m in emu.conversation_messages(channel) if m["text"].startswith(BOARD_TITLE)]


def board_text(emu: Emulator, channel: str) -> str | None:
    found = boards(emu, channel)
    return str(found[0]["text"]) if found else None


def vote_message(emu: Emulator, channel: str, ts: str) -> dict[str, Any] | None:
    return next((m for m in thread(emu, channel, ts) if m["text"].startswith("🗳️ Vote from")), None)


def buttons(message: dict[str, Any]) -> dict[str, str]:
    """A vote message's buttons: label → action id."""
    found = {}
    for block in message.get("blocks") or []:
        for element in block.get("elements") or []:
            if element.get("type") == "button":
                found[element["text"]["text"]] = element["action_id"]
    return found


def ballots(db: Path) -> dict[str, str]:
    return {str(voter): str(choice) for voter, choice in sql(db, "SELECT voter, choice FROM ballots")}


def turns_done(db: Path, instance: str) -> int:
    rows = sql(db, "SELECT count(*) FROM turns WHERE instance = ? AND status != 'running'", instance)
    return int(rows[0][0])


def age_tasks(db: Path, seconds: float) -> None:
    """Every task was last reported on ``seconds`` earlier than it was."""
    sql(db, "UPDATE tasks SET updated_at = updated_at - ?, created_at = created_at - ?", seconds, seconds)


def age_votes(db: Path, seconds: float) -> None:
    """Every vote's question went out (and its reminder, if any) ``seconds`` earlier."""
    sql(
        db,
        "UPDATE votes SET posted_at = posted_at - ?, reminded_at = reminded_at - ?",
        seconds,
        seconds,
    )
