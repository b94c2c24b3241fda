"""Teammates (docs/agents.md): who an instance's agent is, from ``teammates/<instance>/``.

- ``SOUL.md``: who it is. Optional front matter between two ``---`` lines at the
  top, simple ``key: value`` lines (``role``, ``emoji``, ``prompts``: the assistant
  pane's suggested prompts, a one-line list such as ``["Plan my day", "What is blocked?"]``,
  at most 4 used; ``serial: true``: one turn at a time across its threads; other keys are
  ignored). A block that does not parse (never closed, a
  line that is no ``key: value``, a ``prompts`` list left open) is a ``Problem`` (file,
  line): the turns use the file without the broken part, ``doctor`` fails on it, and
  ``TeammateSource`` logs it once.
- ``AGENTS.md`` (optional): how it works.
- ``TeammateSource`` reads both again when either changed on disk, so an edit applies
  from the next turn without a restart.
- ``teammates/_skills/*.md``: shared skills, listed by name (the file stem) and their
  front matter's ``description:`` (else their first non-empty line, a leading Markdown
  ``#`` removed) in every system prompt, read from disk on every call so an edit
  applies to the next turn. A skill's front matter that does not parse is a ``Problem``
  too (``skill_problems``, a ``doctor`` ✗).

``Roster``: the teammates an instance may reach, each with its role (front matter ``role:``,
else the first line of its ``SOUL.md``), read again when their files change; the turn's
opening lists them (``[Teammates]``, docs/agents.md).

The system prompt is the persona first (SOUL body), then AGENTS.md, then the
skills. An instance without ``SOUL.md`` (typically: no folder at all) gets a plain
default persona; ``Teammate.is_default`` lets the caller warn at start. How to post
is the back end's business: the LLM back ends append their ``send_message`` rule.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from nanoslack.logs import get_logger

log = get_logger(__name__)

SKILLS_DIRNAME = "_skills"
SOUL_FILE = "SOUL.md"
AGENTS_FILE = "AGENTS.md"
SKILLS_HEADING = "Skills you can use:"
SKILLS_HOW = "Read a skill's full text with the read_skill tool before you use it."
# Slack's assistant pane shows at most this many suggested prompts.
MAX_PROMPTS = 4
# A role taken from SOUL.md's first line is cut to this: one line of the teammates list.
ROLE_CHARS = 120
_YES = frozenset({"true", "yes", "on", "1"})
_NO = frozenset({"false", "no", "off", "0", ""})
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
    problems: tuple[Problem, ...] = ()  # what in SOUL.md's front matter did not parse
    # ``serial: true``: at most one turn of the instance at a time, across its threads
    # (``nanoslack.turns.slot``).
    serial: bool = False

    def system_prompt(self, skills_dir: Path) -> str:
        parts = [self.soul.strip(), self.agents_md.strip(), skills_section(skills_dir)]
        return "\n\n".join(part for part in parts if part)


@dataclass(frozen=True)
class Problem:
    """A front matter that does not parse: where, and what the turns use instead."""

    file: str
    line: int
    what: str

    def words(self) -> str:
        return f"{self.file}:{self.line}: {self.what}"


@dataclass(frozen=True)
class FrontMatter:
    meta: dict[str, str]
    body: str
    problems: tuple[Problem, ...] = ()


def split_front_matter(text: str, file: str = SOUL_FILE) -> tuple[dict[str, str], str]:
    """``---\nrole: planner\n---\nbody`` → ``({"role": "planner"}, "body")``."""
    parsed = parse_front_matter(text, file)
    return parsed.meta, parsed.body


def parse_front_matter(text: str, file: str = SOUL_FILE) -> FrontMatter:
    """The front matter, the body, and what did not parse. Only simple ``key: value``
    lines; values lose surrounding quotes. Text that does not open with ``---`` has none.
    A block never closed ends at its last ``key: value`` line: the rest is the body, so
    the persona is never the block itself."""
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        return FrontMatter({}, text.strip())
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
    if end is None:
        end = 1
        while end < len(lines) and (not lines[end].strip() or _FRONT_MATTER_KEY_RE.match(lines[end].strip())):
            end += 1
        problem = Problem(file, 1, "front matter opened with --- is never closed by a --- line")
        # The broken block is left out whole: its keys too, since where it ends is a guess.
        return FrontMatter({}, "\n".join(lines[end:]).strip(), (problem,))
    block, body = lines[1:end], lines[end + 1 :]
    meta: dict[str, str] = {}
    problems: list[Problem] = []
    for number, line in enumerate(block, start=2):
        if not line.strip() or line.strip().startswith("#"):
            continue
        m = _FRONT_MATTER_KEY_RE.match(line.strip())
        if m is None:
            problems.append(Problem(file, number, f"not a key: value line: {line.strip()[:60]!r}"))
            continue
        key, value = m.group(1).lower(), _unquote(m.group(2).strip())
        if key == "prompts" and (what := _prompts_problem(value)):
            problems.append(Problem(file, number, what))
            continue
        if key == "serial" and value.lower() not in _YES | _NO:
            problems.append(Problem(file, number, f"serial is true or false, not {value[:20]!r}"))
            continue
        meta[key] = value
    return FrontMatter(meta, "\n".join(body).strip(), tuple(problems))


def _prompts_problem(value: str) -> str | None:
    """Why a ``prompts`` value is not a list (None: it is one, JSON or ``[a, b]``)."""
    value = value.strip()
    if not value.startswith("["):
        return None
    try:
        json.loads(value)
    except ValueError:
        if not value.endswith("]"):
            return f'prompts list is not closed: {value[:60]!r} (write it as ["one", "two"] on one line)'
    return None


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
    parsed = parse_front_matter(soul_text, str(folder / SOUL_FILE))
    meta = parsed.meta
    return Teammate(
        instance,
        meta.get("role", ""),
        meta.get("emoji", ""),
        parsed.body or default_soul(instance),
        agents_md,
        present,
        prompts=parse_prompts(meta.get("prompts", "")),
        problems=parsed.problems,
        serial=meta.get("serial", "").strip().lower() in _YES,
    )


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


class TeammateSource:
    """An instance's teammate as its files say now: ``SOUL.md`` and ``AGENTS.md`` are read
    again when either changed (two ``stat`` calls a turn), so an edit applies from the next
    turn without a restart (docs/agents.md). What is wrong with a version of the files is
    logged once, when that version is read."""

    def __init__(self, teammates_dir: Path, instance: str, *, report: bool = True) -> None:
        self._folder = Path(teammates_dir) / instance
        # False for a sibling read only for its role: its own process reports its files.
        self._reports = report
        self._teammates_dir = Path(teammates_dir)
        self._instance = instance
        self._stamps: tuple[tuple[int, int] | None, ...] | None = None
        self._teammate: Teammate | None = None

    def get(self) -> Teammate:
        stamps = (_stamp(self._folder / SOUL_FILE), _stamp(self._folder / AGENTS_FILE))
        if self._teammate is None or stamps != self._stamps:
            self._stamps = stamps
            self._teammate = load_teammate(self._teammates_dir, self._instance)
            if self._reports:
                self._report(self._teammate)
        return self._teammate

    def _report(self, mate: Teammate) -> None:
        if mate.is_default:
            log.warning(
                "teammate missing: using the default persona",
                instance=self._instance,
                folder=str(self._folder),
            )
        for problem in mate.problems:
            log.warning(
                "teammate file malformed",
                instance=self._instance,
                file=problem.file,
                line=problem.line,
                problem=problem.what,
                using="the file without the broken part",
            )


@dataclass(frozen=True)
class Mate:
    """One teammate as a turn's opening lists it: ``eli — reviewer (here)``."""

    name: str
    role: str
    here: bool = False  # a member of the turn's conversation

    def line(self) -> str:
        text = f"{self.name} — {self.role}" if self.role else self.name
        return f"{text} (here)" if self.here else text


def role_of(mate: Teammate) -> str:
    """Front matter ``role:``, else the persona's first non-empty line (a Markdown ``#``
    removed, cut to ``ROLE_CHARS``); "" for a teammate with no ``SOUL.md`` here."""
    if mate.role.strip():
        return mate.role.strip()
    if mate.is_default:
        return ""
    first = next((line.strip() for line in mate.soul.splitlines() if line.strip()), "")
    first = first.lstrip("#").strip()
    return first if len(first) <= ROLE_CHARS else first[: ROLE_CHARS - 1].rstrip() + "…"


class Roster:
    """The teammates an instance may reach (``ToolSettings.teammates_of``), with their roles
    as their files say now (a role edited applies from the next turn)."""

    def __init__(self, teammates_dir: Path, names: Sequence[str]) -> None:
        self._sources = {name: TeammateSource(teammates_dir, name, report=False) for name in names}

    def mates(self, here: Collection[str]) -> tuple[Mate, ...]:
        """Each teammate, marked ``here`` when ``here`` (the conversation's member names)
        names it."""
        present = {name.lower() for name in here}
        return tuple(
            Mate(name, role_of(source.get()), name.lower() in present)
            for name, source in self._sources.items()
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
    """What a skill is for: its front matter's ``description:``, else the first non-empty
    line of its text (a leading Markdown ``#`` removed)."""
    parsed = parse_front_matter(_read(path) or "", str(path))
    if parsed.meta.get("description", "").strip():
        return parsed.meta["description"].strip()
    first = next((line.strip() for line in parsed.body.splitlines() if line.strip()), "")
    return first.lstrip("#").strip()


def skill_problems(skills_dir: Path) -> tuple[Problem, ...]:
    """What in the skills' front matter does not parse (file, line), for ``doctor``."""
    problems: list[Problem] = []
    for path in _skill_files(skills_dir):
        problems += parse_front_matter(_read(path) or "", str(path)).problems
    return tuple(problems)


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
