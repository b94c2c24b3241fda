"""The keys of Slack's agent surface (docs/agent-surface.md), read once at start."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nanoslack.config.values import positive_seconds, warn_malformed

# Slack clears a status line 2 minutes after it was sent: send it again well before.
DEFAULT_STATUS_REFRESH_S = 90.0
# An owner's Home is published again on a change at most this often (docs/agent-surface.md).
DEFAULT_HOME_INTERVAL_S = 10.0
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


@dataclass(frozen=True)
class SurfaceSettings:
    # NANOSLACK_STREAM: replies in DMs and assistant threads are streamed (chat.startStream).
    stream: bool = True
    # NANOSLACK_STATUS_REFRESH: seconds between two sends of a turn's status line.
    status_refresh: float = DEFAULT_STATUS_REFRESH_S
    # NANOSLACK_HOME_INTERVAL: seconds between two publishes of one person's Home tab.
    home_interval: float = DEFAULT_HOME_INTERVAL_S


def parse_surface_settings(env: Mapping[str, str], log: Any) -> SurfaceSettings:
    return SurfaceSettings(
        stream=_flag(env, "NANOSLACK_STREAM", True, log),
        status_refresh=positive_seconds(env, "NANOSLACK_STATUS_REFRESH", DEFAULT_STATUS_REFRESH_S, log),
        home_interval=positive_seconds(env, "NANOSLACK_HOME_INTERVAL", DEFAULT_HOME_INTERVAL_S, log),
    )


def _flag(env: Mapping[str, str], key: str, default: bool, log: Any) -> bool:
    raw = (env.get(key) or "").strip().lower()
    if not raw:
        return default
    if raw in _TRUE or raw in _FALSE:
        return raw in _TRUE
    warn_malformed(log, key, raw, "1 or 0", "1" if default else "0")
    return default
