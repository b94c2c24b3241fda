"""Workspace files (JSON): load into an engine or a driver; the embedded sample workspace."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

from .state import App, Conversation, User

JSON = dict[str, Any]


class WorkspaceBuilder(Protocol):
    """What applying a spec needs: the engine and the async driver both fit."""

    def add_user(self, name: str, real_name: str | None = None, id: str | None = None) -> User: ...

    def add_app(
        self,
        name: str,
        *,
        app_id: str | None = None,
        bot_id: str | None = None,
        bot_user_id: str | None = None,
        bot_token: str | None = None,
        app_token: str | None = None,
        events: list[str] | None = None,
    ) -> App: ...

    def create_conversation(
        self, members: list[str], kind: str = "mpim", name: str | None = None, id: str | None = None
    ) -> Conversation: ...


def sample_workspace() -> JSON:
    """The embedded default: one human (alice), three apps (dana, eli, fay), an MPIM with all four."""
    return {
        "team": {"id": "T0EMULATOR", "name": "nanoslack-emu"},
        "users": [{"name": "alice", "real_name": "Alice"}],
        "apps": [{"name": "dana"}, {"name": "eli"}, {"name": "fay"}],
        "conversations": [
            {"kind": "mpim", "members": ["alice", "dana", "eli", "fay"]},
        ],
    }


def load_workspace_file(path: str | Path) -> JSON:
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict):
        raise ValueError("workspace file must hold a JSON object")
    return data


def team_of(spec: JSON) -> tuple[str, str]:
    team = spec.get("team") or {}
    return str(team.get("id", "T0EMULATOR")), str(team.get("name", "nanoslack-emu"))


def apply_workspace(emu: WorkspaceBuilder, spec: JSON) -> None:
    """Create the users, apps and conversations of a workspace spec (call before clients connect)."""
    for u in spec.get("users", []):
        emu.add_user(u["name"], real_name=u.get("real_name"), id=u.get("id"))
    for a in spec.get("apps", []):
        kw = {
            k: a[k]
            for k in ("app_id", "bot_id", "bot_user_id", "bot_token", "app_token", "events")
            if a.get(k)
        }
        emu.add_app(a["name"], **kw)
    for c in spec.get("conversations", []):
        emu.create_conversation(
            list(c["members"]), kind=c.get("kind", "mpim"), name=c.get("name"), id=c.get("id")
        )
