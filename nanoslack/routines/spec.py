"""What a teammate's ``routines.toml`` says (docs/routines.md): its routines, or why not.

::

    [[routine]]
    name = "daily-plan"
    cron = "0 9 * * 1-5"          # or: every = "30m"
    channel = "owner"              # or a conversation id, C… / G…
    prompt = "Plan the day: what is due, what is blocked."
    gate = "./has-work.sh"         # optional; exit 1 skips the run with no model call
    max_steps = 4                  # optional, at most NANOSLACK_MAX_STEPS
    daily_tokens = 20000           # optional

A file that is not TOML, or whose shape is wrong (no ``[[routine]]`` table array, a
field of the wrong type), is one problem for the whole file: the instance runs without
routines. A routine that is wrong on its own (a bad schedule, an unknown channel, a gate
that cannot run) is a problem naming it, and the file's other routines run.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import tomllib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cronsim import CronSim, CronSimError

FILENAME = "routines.toml"
OWNER = "owner"
NAME_RE = re.compile(r"[a-z0-9_-]+")
EVERY_RE = re.compile(r"\s*(\d+)\s*([smhd])\s*")
CHANNEL_RE = re.compile(r"[CGD][A-Z0-9]+")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
KNOWN_KEYS = frozenset({"name", "every", "cron", "channel", "prompt", "gate", "max_steps", "daily_tokens"})
# A cron expression whose next time is further than this is taken for one that never fires.
CRON_HORIZON_DAYS = 366 * 5


@dataclass(frozen=True, slots=True)
class Every:
    """``every = "<n>s|m|h|d"``: due times on a grid from the epoch, so every process (and
    every restart) computes the same due times: the unique row is what makes a due time once."""

    seconds: int
    text: str

    def next_after(self, t: float) -> float:
        return float((int(t // self.seconds) + 1) * self.seconds)

    def interval_at(self, _due: float) -> float:
        return float(self.seconds)

    def describe(self) -> str:
        return f"every {self.text}"


@dataclass(frozen=True, slots=True)
class Cron:
    """``cron = "m h dom mon dow"`` in ``NANOSLACK_TZ``."""

    expr: str
    tz: dt.tzinfo

    def next_after(self, t: float) -> float:
        start = dt.datetime.fromtimestamp(int(t), self.tz)
        nxt = next(CronSim(self.expr, start))
        if nxt.timestamp() <= t:  # CronSim starts at the start's own minute when it matches
            nxt = next(CronSim(self.expr, nxt + dt.timedelta(seconds=1)))
        return float(nxt.timestamp())

    def interval_at(self, due: float) -> float:
        return self.next_after(due) - due

    def describe(self) -> str:
        return f"cron {self.expr}"


Schedule = Every | Cron


@dataclass(frozen=True, slots=True)
class Routine:
    instance: str
    name: str
    schedule: Schedule
    channel: str  # a conversation id, or "owner"
    prompt: str
    gate: str = ""
    max_steps: int | None = None
    daily_tokens: int | None = None
    folder: Path = field(default=Path("."))

    @property
    def to_owners(self) -> bool:
        return self.channel == OWNER


@dataclass(frozen=True, slots=True)
class Problem:
    """One ``routines malformed`` line: the file, the line (0: unknown), the routine (or "")."""

    file: str
    line: int
    routine: str
    what: str


@dataclass(frozen=True)
class RoutineFile:
    path: Path
    routines: tuple[Routine, ...] = ()
    problems: tuple[Problem, ...] = ()


# Answers whether the instance's bot is a member of a conversation (None: cannot tell).
MemberOf = Callable[[str], bool | None]


def routines_path(teammates_dir: Path, instance: str) -> Path:
    return teammates_dir / instance / FILENAME


def load(
    path: Path,
    instance: str,
    *,
    tz: dt.tzinfo = dt.UTC,
    max_steps: int | None = None,
    member_of: MemberOf | None = None,
    now: float | None = None,
) -> RoutineFile:
    """The file's routines and problems; a missing file is no routines and no problem."""
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return RoutineFile(path)
    except OSError as exc:
        return RoutineFile(path, problems=(Problem(str(path), 0, "", f"cannot read: {exc.strerror}"),))
    return parse(raw, path, instance, tz=tz, max_steps=max_steps, member_of=member_of, now=now)


def parse(
    raw: str,
    path: Path,
    instance: str,
    *,
    tz: dt.tzinfo = dt.UTC,
    max_steps: int | None = None,
    member_of: MemberOf | None = None,
    now: float | None = None,
) -> RoutineFile:
    file = str(path)
    try:
        doc = tomllib.loads(raw)
    except tomllib.TOMLDecodeError as exc:
        return RoutineFile(path, problems=(Problem(file, _error_line(exc), "", f"not TOML: {exc}"),))
    tables = doc.get("routine", [])
    extra = sorted(set(doc) - {"routine"})
    if extra or not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        what = f"unknown key {extra[0]!r}" if extra else "expected [[routine]] tables"
        return RoutineFile(path, problems=(Problem(file, 1, "", what),))
    lines = _table_lines(raw)
    routines: list[Routine] = []
    problems: list[Problem] = []
    seen: set[str] = set()
    for i, table in enumerate(tables):
        line = lines[i] if i < len(lines) else 0
        result = _routine(table, path, instance, tz, max_steps, member_of, now)
        name = str(table.get("name", "")) if isinstance(table.get("name"), str) else ""
        if isinstance(result, str):
            problems.append(Problem(file, line, name, result))
        elif result.name in seen:
            problems.append(Problem(file, line, result.name, "a second routine with this name"))
        else:
            seen.add(result.name)
            routines.append(result)
    return RoutineFile(path, tuple(routines), tuple(problems))


def _routine(
    t: dict[str, Any],
    path: Path,
    instance: str,
    tz: dt.tzinfo,
    max_steps: int | None,
    member_of: MemberOf | None,
    now: float | None,
) -> Routine | str:
    unknown = sorted(set(t) - KNOWN_KEYS)
    if unknown:
        return f"unknown key {unknown[0]!r}"
    name = t.get("name")
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        return "name must be [a-z0-9_-]+"
    schedule = _schedule(t, tz, now)
    if isinstance(schedule, str):
        return schedule
    channel = t.get("channel", OWNER)
    if not isinstance(channel, str) or not (channel == OWNER or CHANNEL_RE.fullmatch(channel)):
        return f'unknown channel {channel!r}: a conversation id (C…, G…, D…) or "owner"'
    if channel != OWNER and member_of is not None and member_of(channel) is False:
        return f"the bot is not a member of {channel}"
    prompt = t.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        return "prompt is missing"
    gate = t.get("gate", "")
    if not isinstance(gate, str):
        return "gate must be a command (a string)"
    if gate and (problem := _gate_problem(gate, path.parent)):
        return problem
    steps = _positive(t, "max_steps")
    if isinstance(steps, str):
        return steps
    if steps is not None and max_steps is not None and steps > max_steps:
        return f"max_steps {steps} is above NANOSLACK_MAX_STEPS ({max_steps})"
    tokens = _positive(t, "daily_tokens")
    if isinstance(tokens, str):
        return tokens
    return Routine(
        instance=instance,
        name=name,
        schedule=schedule,
        channel=channel,
        prompt=prompt.strip(),
        gate=gate.strip(),
        max_steps=steps,
        daily_tokens=tokens,
        folder=path.parent,
    )


def _schedule(t: dict[str, Any], tz: dt.tzinfo, now: float | None) -> Schedule | str:
    every, cron = t.get("every"), t.get("cron")
    if (every is None) == (cron is None):
        return "give one of every or cron"
    if every is not None:
        m = EVERY_RE.fullmatch(every) if isinstance(every, str) else None
        if m is None:
            return f"every {every!r} is not <n>s, <n>m, <n>h or <n>d"
        seconds = int(m.group(1)) * UNITS[m.group(2)]
        if seconds < 1:
            return f"every {every!r} is below 1 s"
        return Every(seconds, every.strip())
    if not isinstance(cron, str) or len(cron.split()) != 5:
        return f"cron {cron!r} needs five fields (minute hour day month weekday)"
    expr = " ".join(cron.split())
    schedule = Cron(expr, tz)
    start = dt.datetime.now(dt.UTC).timestamp() if now is None else now
    try:
        nxt = schedule.next_after(start)
    except (CronSimError, StopIteration, ValueError, OverflowError) as exc:
        return f"cron {cron!r} never fires ({exc})" if "day-of-month" in str(exc) else f"cron {cron!r}: {exc}"
    if nxt - start > CRON_HORIZON_DAYS * 86400:
        return f"cron {cron!r} never fires"
    return schedule


# Routines an agent sets (docs/routines.md, "Routines an agent sets"): at most this many an
# instance, each at most once every this many seconds (cron included: its shortest gap).
AGENT_LIMIT = 10
AGENT_MIN_INTERVAL_S = 300
# How many of a cron's coming times are looked at for its shortest gap (300 five-minute
# times cover a day and more: a pattern that fires twice in a minute once a day is found).
_GAPS_LOOKED_AT = 300


def agent_schedule(
    every: str, cron: str, *, tz: dt.tzinfo = dt.UTC, now: float | None = None
) -> Schedule | str:
    """The schedule an agent asked for with ``schedule_routine``, or why not: the file's
    forms (``every`` or ``cron``, one of them), at most once every 5 minutes."""
    given = {key: value.strip() for key, value in (("every", every), ("cron", cron)) if value.strip()}
    schedule = _schedule(given, tz, now)
    if isinstance(schedule, str):
        return schedule
    start = dt.datetime.now(dt.UTC).timestamp() if now is None else now
    gap = shortest_gap(schedule, start)
    if gap < AGENT_MIN_INTERVAL_S:
        return (
            f"{schedule.describe()} is more often than a routine you set may run "
            f"(at most once every {AGENT_MIN_INTERVAL_S // 60} minutes)"
        )
    return schedule


def shortest_gap(schedule: Schedule, start: float) -> float:
    if isinstance(schedule, Every):
        return float(schedule.seconds)
    t, gap = schedule.next_after(start), float("inf")
    for _ in range(_GAPS_LOOKED_AT):
        nxt = schedule.next_after(t)
        gap, t = min(gap, nxt - t), nxt
    return gap


def schedule_from_text(described: str, tz: dt.tzinfo = dt.UTC) -> Schedule | None:
    """A schedule as ``describe`` wrote it (``every 30m``, ``cron 0 9 * * 1-5``), as the
    store keeps an agent's routine; None for text that is neither."""
    kind, _, rest = described.partition(" ")
    given = {"every": rest} if kind == "every" else {"cron": rest} if kind == "cron" else None
    if given is None:
        return None
    schedule = _schedule(given, tz, None)
    return None if isinstance(schedule, str) else schedule


def _positive(t: dict[str, Any], key: str) -> int | None | str:
    value = t.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return f"{key} must be an integer >= 1"
    return value


def _gate_problem(gate: str, folder: Path) -> str | None:
    """The gate's program must be there and executable: a path (``./check.sh``) from the
    teammate folder, or a command on ``PATH``."""
    program = gate.split()[0]
    if "/" not in program:
        return None if shutil.which(program) else f"gate {program!r} is not found on PATH"
    candidate = folder / program
    if not candidate.is_file():
        return f"gate {program!r} does not exist in {folder}"
    if not os.access(candidate, os.X_OK):
        return f"gate {program!r} is not executable (chmod +x)"
    return None


def _table_lines(raw: str) -> list[int]:
    """The line of each ``[[routine]]`` header, in order (tomllib keeps no positions)."""
    return [i for i, line in enumerate(raw.splitlines(), start=1) if line.strip().startswith("[[routine]]")]


def _error_line(exc: tomllib.TOMLDecodeError) -> int:
    m = re.search(r"line (\d+)", str(exc))
    return int(m.group(1)) if m else 0


# Whether the instance's bot is in a conversation: False (not, or no such conversation),
# None (Slack could not say: the routine is kept).
AsyncMemberOf = Callable[[str], Awaitable[bool | None]]


async def check_channels(
    file: RoutineFile, member_of: AsyncMemberOf, *, owners: Sequence[str] | None = None
) -> RoutineFile:
    """The file with each routine whose conversation the bot is not in (or that does not
    exist), or that posts to the owners when there is none, turned into a problem naming it."""
    kept: list[Routine] = []
    problems = list(file.problems)
    for routine in file.routines:
        if routine.to_owners and owners is not None and not owners:
            problems.append(
                Problem(str(file.path), 0, routine.name, 'channel "owner" but SLACK_OWNER is empty')
            )
        elif not routine.to_owners and await member_of(routine.channel) is False:
            problems.append(
                Problem(
                    str(file.path),
                    0,
                    routine.name,
                    f"unknown channel {routine.channel} or the bot is not in it",
                )
            )
        else:
            kept.append(routine)
    return RoutineFile(file.path, tuple(kept), tuple(problems))


def describe(problems: Sequence[Problem]) -> list[str]:
    return [f"{p.file}:{p.line}: {p.routine + ': ' if p.routine else ''}{p.what}" for p in problems]


# What to do about each problem ``parse`` and ``check_channels`` name, by how its text begins:
# ``doctor``'s fix and ``nanoslack routines``'s hint (docs/routines.md).
_FIXES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), fix)
    for pattern, fix in (
        (r"not TOML", "correct the TOML at that line (an unclosed quote or bracket, a missing =)"),
        (r"cannot read", "make the file readable by the fleet's user"),
        (
            r"unknown key '(?P<key>[^']*)'",
            "remove `{key}`; a routine's keys are " + ", ".join(sorted(KNOWN_KEYS)),
        ),
        (r"expected \[\[routine\]\] tables", "write each routine as a [[routine]] table"),
        (r"name must be", "name the routine with lowercase letters, digits, - or _"),
        (r"give one of every or cron", 'give it every = "30m" or cron = "0 9 * * 1-5" (one of them)'),
        (r"every ", 'write every as <n>s, <n>m, <n>h or <n>d, at least 1 s (every = "30m")'),
        (r"cron ", 'write cron as five fields, minute hour day month weekday, that can fire ("0 9 * * 1-5")'),
        (r"unknown channel '", 'set channel to a conversation id (C…, G…, D…) or "owner"'),
        (
            r"channel \"owner\" but SLACK_OWNER",
            "set SLACK_OWNER in .env, or give the routine a conversation id",
        ),
        (
            r"(unknown channel \S+ or )?the bot is not",
            "check the id, and invite the bot there (/invite in it)",
        ),
        (r"prompt is missing", 'give it prompt = "what to do"'),
        (r"gate must be", 'make gate a command in quotes (gate = "./has-work.sh")'),
        (r"gate .* is not found on PATH", "install the gate's program, or give its path"),
        (r"gate .* does not exist", "put the gate script in the teammate's folder, or fix its path"),
        (r"gate .* is not executable", "make the gate executable (chmod +x)"),
        (r"max_steps .* is above NANOSLACK_MAX_STEPS", "lower max_steps, or raise NANOSLACK_MAX_STEPS"),
        (r"(?P<key>\w+) must be an integer", "set {key} to a whole number of at least 1"),
        (r"a second routine with this name", "rename one of the two routines"),
    )
)


def how_to_fix(problem: Problem) -> str:
    """The fix for ``problem`` in a few words (docs/routines.md has the file's form)."""
    for pattern, fix in _FIXES:
        if match := pattern.match(problem.what):
            return fix.format(**{k: v or "" for k, v in match.groupdict().items()})
    return "see docs/routines.md for the file's form"
