"""A test fleet's ``.env`` for a set of emulator apps, and reads of its SQLite store:
what the end-to-end tests, the soak and the benchmarks share."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from nanoslack.config import env_suffix
from nanoslack.emulator import App, Emulator
from nanoslack.ops.envfile import write_env

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
