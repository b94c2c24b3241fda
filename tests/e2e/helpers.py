"""What the end-to-end and soak tests share (importable, unlike ``conftest``): the
fleet's ``.env`` for a set of emulator apps, and reading the SQLite store directly."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from nanoslack.config import env_suffix
from nanoslack.emulator import App, Emulator
from nanoslack.ops.envfile import write_env
from tests.llm_server import LLMServer, backend_env

# The agent every test fleet runs unless a test names another: a rules script with no
# rule, so turns run (and are recorded) but post nothing, without a process per turn.
SILENT_AGENT = {
    "NANOSLACK_AGENT": "script",
    "NANOSLACK_AGENT_SCRIPT": str(Path(__file__).with_name("silent_agent.json")),
}


def fleet_env(emu: Emulator, apps: list[App], db: Path, **extra: str) -> dict[str, str]:
    """The keys of a fleet running ``apps`` against ``emu`` on the SQLite file ``db``;
    ``extra`` adds or overrides keys."""
    if "NANOSLACK_AGENT_COMMAND" in extra:  # naming a command means running it
        extra = {"NANOSLACK_AGENT": "command", **extra}
    values = {
        "SLACK_API_URL": emu.api_url,
        "NANOSLACK_DB": str(db),
        "SLACK_INSTANCES": ",".join(a.name for a in apps),
    }
    for app in apps:
        suf = env_suffix(app.name)
        values |= {f"SLACK_BOT_TOKEN_{suf}": app.bot_token, f"SLACK_APP_TOKEN_{suf}": app.app_token}
    return values | SILENT_AGENT | extra


def write_fleet_env(path: Path, emu: Emulator, apps: list[App], db: Path, **extra: str) -> Path:
    """``fleet_env`` as the whole ``.env`` at ``path`` (an earlier file is replaced)."""
    write_env(path, fleet_env(emu, apps, db, **extra), replace=True)
    return path


def sql(db: Path, query: str, *params: Any) -> list[tuple[Any, ...]]:
    """``query``'s rows, on a connection of its own (committed: it may be an UPDATE)."""
    conn = sqlite3.connect(db, timeout=5)
    try:
        rows = conn.execute(query, params).fetchall()
        conn.commit()
        return rows
    finally:
        conn.close()


def scalar(db: Path, query: str, *params: Any) -> int:
    return int(sql(db, query, *params)[0][0])


def dm_buttons(emu: Emulator, owner: str, action_id: str) -> list[dict[str, Any]]:
    """Every button ``action_id`` in the owner's DMs: where it is and the value it carries."""
    found = []
    for conv in emu.conversations():
        if conv.kind == "im" and owner in conv.members:
            for msg in emu.conversation_messages(conv.id):
                for block in msg.get("blocks") or []:
                    for el in block.get("elements") or []:
                        if el.get("action_id") == action_id:
                            found.append({"channel": conv.id, "ts": msg["ts"], "value": el.get("value")})
    return found


def message_text(emu: Emulator, where: dict[str, Any]) -> str:
    """The text and blocks of the message at ``where`` (a ``dm_buttons`` entry), as one string."""
    for msg in emu.conversation_messages(where["channel"]):
        if msg["ts"] == where["ts"]:
            return str(msg.get("text", "")) + str(msg.get("blocks", ""))
    return ""


def openai_env(owner: str, llm: LLMServer, teammates: Path, **extra: str) -> dict[str, str]:
    """The keys of a fleet whose owner is ``owner``, on the ``openai`` back end against the
    model server ``llm`` (model ``gpt-test``), with the personas in ``teammates``."""
    return {
        "SLACK_OWNER": owner,
        **backend_env("openai", llm, "sk-test-0123456789"),
        "NANOSLACK_MODEL": "gpt-test",
        "NANOSLACK_TEAMMATES": str(teammates),
        **extra,
    }
