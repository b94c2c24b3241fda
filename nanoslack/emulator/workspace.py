"""Workspace files (JSON) and the embedded sample workspace (``driver.apply_workspace`` fills a driver)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

JSON = dict[str, Any]


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
