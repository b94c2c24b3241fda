"""What a teammate is, in one line, for people who meet it in Slack (docs/agent-surface.md):
the app manifest's ``agent_description`` and what the Home tab shows anyone who is no owner.

``SOUL.md`` front matter ``description:``, else ``role:``, else a plain default. Read fresh
each time: an edit shows at the next Home publish (the manifest is printed once).
"""

from __future__ import annotations

from pathlib import Path

from nanoslack.agents.teammates import SOUL_FILE, parse_front_matter


def default_description(instance: str) -> str:
    return f"nanoslack teammate '{instance}'"


def teammate_description(teammates_dir: Path | None, instance: str) -> str:
    if teammates_dir is None:
        return default_description(instance)
    path = Path(teammates_dir) / instance / SOUL_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return default_description(instance)
    meta = parse_front_matter(text, str(path)).meta
    for key in ("description", "role"):
        value = meta.get(key, "").strip()
        if value:
            return value
    return default_description(instance)
