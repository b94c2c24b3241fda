"""Small parsers every configuration module shares: lists, the ``.env`` file, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
