"""The keys of rooms that work as teams (docs/configuration.md, docs/team-rooms.md), read once at start.

``NANOSLACK_VOTE_REMIND`` (60) and ``NANOSLACK_VOTE_CLOSE`` (120) are the documented
defaults (docs/configuration.md). How long
a task may stay silent before its ping (30 minutes) and before it no longer counts as
in progress (2 hours) are fixed and not keys; tests move the store's clock
instead (``tasks.updated_at``), as an operator's SQL could.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nanoslack.config.values import positive_seconds

DEFAULT_VOTE_REMIND_S = 60.0
DEFAULT_VOTE_CLOSE_S = 120.0
TASK_PING_S = 30 * 60.0
TASK_STALE_S = 2 * 60 * 60.0


@dataclass(frozen=True)
class TeamSettings:
    vote_remind: float = DEFAULT_VOTE_REMIND_S  # NANOSLACK_VOTE_REMIND
    vote_close: float = DEFAULT_VOTE_CLOSE_S  # NANOSLACK_VOTE_CLOSE
    task_ping: float = TASK_PING_S
    task_stale: float = TASK_STALE_S
    # How often each instance looks for what is due (pings, reminders, results).
    tick: float = 1.0


def parse_team_settings(env: Mapping[str, str], log: Any) -> TeamSettings:
    return TeamSettings(
        vote_remind=positive_seconds(env, "NANOSLACK_VOTE_REMIND", DEFAULT_VOTE_REMIND_S, log),
        vote_close=positive_seconds(env, "NANOSLACK_VOTE_CLOSE", DEFAULT_VOTE_CLOSE_S, log),
    )
