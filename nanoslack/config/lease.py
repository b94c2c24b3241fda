"""The lease keys (docs/operations.md): how long an instance's lease lives without a
heartbeat, and how often its holder renews it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from nanoslack.config.values import positive_seconds
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
    def from_env(cls, env: Mapping[str, str]) -> LeaseTimings:
        ttl = positive_seconds(env, TTL_KEY, DEFAULT_TTL, log)
        heartbeat = positive_seconds(env, HEARTBEAT_KEY, DEFAULT_HEARTBEAT, log)
        if heartbeat >= ttl:
            log.warning("lease heartbeat not below lease time", key=HEARTBEAT_KEY, using=ttl / 3)
            heartbeat = ttl / 3
        return cls(ttl, heartbeat)
