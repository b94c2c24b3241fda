"""The lease keys (docs/operations.md): how long an instance's lease lives without a
heartbeat, and how often its holder renews it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nanoslack.config.values import positive_seconds, warn_malformed
from nanoslack.logs import get_logger

log = get_logger("nanoslack.lease")

TTL_KEY = "NANOSLACK_LEASE_SECONDS"
HEARTBEAT_KEY = "NANOSLACK_LEASE_HEARTBEAT"
DEFAULT_TTL = 15.0
DEFAULT_HEARTBEAT = 5.0


@dataclass(frozen=True, slots=True)
class LeaseTimings:
    ttl: float = DEFAULT_TTL
    heartbeat: float = DEFAULT_HEARTBEAT

    @property
    def poll(self) -> float:
        return min(1.0, self.heartbeat)

    @classmethod
    def from_env(cls, env: Mapping[str, str], report: Any = None) -> LeaseTimings:
        report = report or log
        ttl = positive_seconds(env, TTL_KEY, DEFAULT_TTL, report)
        heartbeat = positive_seconds(env, HEARTBEAT_KEY, DEFAULT_HEARTBEAT, report)
        if heartbeat >= ttl:
            warn_malformed(
                report, HEARTBEAT_KEY, f"{heartbeat:g}", f"seconds below {TTL_KEY} ({ttl:g})", ttl / 3
            )
            heartbeat = ttl / 3
        return cls(ttl, heartbeat)
