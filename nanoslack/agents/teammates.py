"""Teammates (docs/agents.md): who an instance's agent is, from ``teammates/<instance>/``.

- ``SOUL.md``: who it is. Optional front matter between two ``---`` lines at the
  top, simple ``key: value`` lines (``role``, ``emoji``, ``prompts``: the assistant
  pane's suggested prompts, a one-line list such as ``["Plan my day", "What is blocked?"]``,
  at most 4 used; other keys are ignored).
- ``AGENTS.md`` (optional): how it works.
- ``teammates/_skills/*.md``: shared skills, listed by name (the file stem) and
  first non-empty line (a leading Markdown ``#`` removed) in every system prompt,
  read from disk on every call so an edit applies to the next turn.

The system prompt is the persona first (SOUL body), then AGENTS.md, then the
skills. An instance without ``SOUL.md`` (typically: no folder at all) gets a plain
default persona; ``Teammate.is_default`` lets the caller warn at start. How to post
is the back end's business: the LLM back ends append their ``send_message`` rule.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

SKILLS_DIRNAME = "_skills"
SOUL_FILE = "SOUL.md"
AGENTS_FILE = "AGENTS.md"
SKILLS_HEADING = "Skills you can use:"
SKILLS_HOW = "Read a skill's full text with the read_skill tool before you use it."
# Slack's assistant pane shows at most this many suggested prompts.
MAX_PROMPTS = 4
_FRONT_MATTER_KEY_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*)\s*:\s*(.*)$")


def default_soul(instance: str) -> str:
    return (
        f"You are {instance}, a helpful teammate in a Slack workspace. You work with people "
        "and with other AI teammates. Be brief, friendly and concrete."
    )


@dataclass(frozen=True)
class Teammate:
    name: str
    role: str
    emoji: str
    soul: str  # SOUL.md body, front matter removed
    agents_md: str
    folder: Path | None
    is_default: bool = False  # no SOUL.md: the plain default persona is used
    prompts: tuple[str, ...] = ()  # the assistant pane's suggested prompts (front matter)

    def system_prompt(self, skills_dir: Path) -> str:
        parts = [self.soul.strip(), self.agents_md.strip(), skills_section(skills_dir)]
        return "\n\n".join(part for part in parts if part)


def split_front_matter(text: str) -> tuple[dict[str, str], str]:
    """``---\\nrole: planner\\n---\\nbody`` → ``({"role": "planner"}, "body")``.

    Only simple ``key: value`` lines; values lose surrounding quotes. Text that does
    not open with ``---`` has no front matter; an unclosed block is kept as body.
    """
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        return {}, text.strip()
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        return {}, text.strip()
    meta: dict[str, str] = {}
    for line in lines[1:end]:
        m = _FRONT_MATTER_KEY_RE.match(line.strip())
        if m:
            meta[m.group(1).lower()] = _unquote(m.group(2).strip())
    return meta, "\n".join(lines[end + 1 :]).strip()


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None


def load_teammate(teammates_dir: Path, instance: str) -> Teammate:
    folder = Path(teammates_dir) / instance
    soul_text = _read(folder / SOUL_FILE)
    agents_md = (_read(folder / AGENTS_FILE) or "").strip()
    present = folder if folder.is_dir() else None
    if soul_text is None:
        return Teammate(instance, "", "", default_soul(instance), agents_md, present, is_default=True)
    meta, body = split_front_matter(soul_text)
    soul = body or default_soul(instance)
    return Teammate(
        instance,
        meta.get("role", ""),
        meta.get("emoji", ""),
        soul,
        agents_md,
        present,
        prompts=parse_prompts(meta.get("prompts", "")),
    )


def parse_prompts(value: str) -> tuple[str, ...]:
    """``["Plan my day", "What is blocked?"]`` (JSON) or ``[Plan my day, What is blocked?]``
    → the prompts, at most ``MAX_PROMPTS``, empty ones dropped."""
    value = value.strip()
    if not value:
        return ()
    items: list[object]
    try:
        parsed = json.loads(value)
        items = list(parsed) if isinstance(parsed, list) else [parsed]
    except ValueError:
        items = [part for part in value.strip("[]").split(",")]
    prompts = [_unquote(str(item).strip()).strip() for item in items]
    return tuple(p for p in prompts if p)[:MAX_PROMPTS]


def skill_summary(path: Path) -> str:
    text = _read(path) or ""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return first.lstrip("#").strip()


def _skill_files(skills_dir: Path) -> list[Path]:
    try:
        return sorted(p for p in Path(skills_dir).glob("*.md") if p.is_file())
    except OSError:
        return []


def list_skills(skills_dir: Path) -> list[str]:
    """The skills' names (file stems), as ``read_skill`` knows them."""
    return [path.stem for path in _skill_files(skills_dir)]


def skills_section(skills_dir: Path) -> str:
    """``Skills you can use:``, one ``- name: first line`` per skill, and how to read one;
    "" when there is none."""
    files = _skill_files(skills_dir)
    if not files:
        return ""
    items = []
    for path in files:
        summary = skill_summary(path)
        items.append(f"- {path.stem}: {summary}" if summary else f"- {path.stem}")
    return "\n".join([SKILLS_HEADING, *items, SKILLS_HOW])
