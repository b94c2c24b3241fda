"""Small parsers every configuration module shares: lists, the ``.env`` file, errors."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
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


def warn_malformed(log: Any, key: str, value: object, expected: str, default: object) -> None:
    log.warning(
        f"config value malformed: {key}",
        key=key,
        value=value,
        expected=expected,
        using=default,
    )


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


def time_zone(value: str | None) -> tuple[dt.tzinfo, str | None]:
    """``NANOSLACK_TZ``, the zone routines' ``cron`` schedules are read in (docs/routines.md):
    an IANA name, default UTC; an unknown zone is UTC, with the reason to warn about."""
    name = (value or "").strip() or "UTC"
    try:
        return ZoneInfo(name), None
    except (ZoneInfoNotFoundError, ValueError):
        return dt.UTC, f"{TZ_KEY}={name!r} is not a known time zone; using UTC"
