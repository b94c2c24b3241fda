"""Small parsers every configuration module shares: lists, the ``.env`` file, errors, and
how a malformed value is reported (``Malformed``: the same words in ``run``'s warning and in
``doctor``'s ✗ line, docs/configuration.md)."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dotenv import dotenv_values


class ConfigError(Exception):
    """A configuration the fleet cannot run with; the message names the key."""


def split_list(value: str | None) -> tuple[str, ...]:
    """Comma list: items trimmed, empties ignored, first occurrence kept."""
    if not value:
        return ()
    items = (item.strip() for item in value.split(","))
    return tuple(dict.fromkeys(item for item in items if item))


def read_env_file(path: Path) -> dict[str, str]:
    """The file's keys; a missing file is empty (the environment alone may configure)."""
    if not path.is_file():
        return {}
    try:
        values = dotenv_values(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read env file {path}: {exc}") from exc
    # `KEY` without `=` parses as None: treat it as unset.
    return {k: v for k, v in values.items() if v is not None}


@dataclass(frozen=True)
class Malformed:
    """A value that does not parse, and what the fleet does instead (docs/configuration.md)."""

    key: str
    value: str
    expected: str
    # What the fleet uses instead, as the operator would write it (a default, "unlimited", …).
    using: str

    def words(self) -> str:
        """The one sentence ``doctor`` prints and ``run``'s warning carries as fields."""
        return f"{self.key}={self.value!r} is not {self.expected}: the fleet uses {self.using}"


class ValueLog:
    """The logger the parsers are given while settings load: every other call passes through
    to ``log``; a malformed value is logged at warning (what ``run`` shows) and kept (what
    ``doctor`` lists), once per key and value."""

    def __init__(self, log: Any) -> None:
        self._log = log
        self.found: list[Malformed] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    def malformed(self, problem: Malformed, using: object) -> None:
        if problem in self.found:
            return
        self.found.append(problem)
        _warn(self._log, problem, using)


class Silent:
    """A logger that says nothing: for a command that reads what ``run`` and ``doctor`` report."""

    def warning(self, *_args: object, **_kwargs: object) -> None:
        return None

    info = debug = error = warning


def _warn(log: Any, problem: Malformed, using: object) -> None:
    log.warning(
        f"config value malformed: {problem.key}",
        key=problem.key,
        value=problem.value,
        expected=problem.expected,
        using=using,
    )


def warn_malformed(log: Any, key: str, value: object, expected: str, default: object) -> Malformed:
    """Say that ``key``'s ``value`` is not ``expected`` and ``default`` is used instead: a
    warning, and with a ``ValueLog`` a kept ``Malformed`` too. Every parser reports here."""
    problem = Malformed(key, str(value), expected, str(default))
    if isinstance(log, ValueLog):
        log.malformed(problem, default)
    else:
        _warn(log, problem, default)
    return problem


def positive_int(env: Mapping[str, str], key: str, default: int, log: Any) -> int:
    """``key`` as a whole number > 0; unset is ``default``, anything else warns and is too."""
    raw = env.get(key, "").strip()
    if not raw:
        return default
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    warn_malformed(log, key, raw, "an integer > 0", default)
    return default


def positive_seconds(env: Mapping[str, str], key: str, default: float, log: Any) -> float:
    """``key`` as a finite number of seconds > 0; unset is ``default``, anything else warns."""
    raw = env.get(key, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value > 0 and math.isfinite(value):
        return value
    warn_malformed(log, key, raw, "a number of seconds > 0", default)
    return default


TZ_KEY = "NANOSLACK_TZ"
TZ_EXPECTED = "an IANA time zone such as Europe/Paris"


def time_zone(value: str | None) -> tuple[dt.tzinfo, Malformed | None]:
    """``NANOSLACK_TZ``, the zone routines' ``cron`` schedules are read in (docs/routines.md):
    an IANA name, default UTC; an unknown zone is UTC, with the problem to report."""
    name = (value or "").strip() or "UTC"
    try:
        return ZoneInfo(name), None
    except (ZoneInfoNotFoundError, ValueError):
        return dt.UTC, Malformed(TZ_KEY, name, TZ_EXPECTED, "UTC")
