"""The two A2A keys (``SLACK_A2A_ROOMS``, ``SLACK_A2A_MAX_HOPS``), re-read while the
fleet runs so an operator's edit applies without a restart (docs/configuration.md)."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nanoslack.config.values import ConfigError, read_env_file, split_list, warn_malformed
from nanoslack.logs import get_logger

DEFAULT_MAX_HOPS = 6
DEFAULT_A2A_TTL = 30.0

_log = get_logger(__name__)


@dataclass(frozen=True)
class A2AConfig:
    rooms: frozenset[str]
    max_hops: int


def parse_rooms(value: str | None) -> frozenset[str]:
    """``' G0A , C0B ,,'`` → ``{"G0A", "C0B"}``; ids match exactly (no case folding)."""
    return frozenset(split_list(value))


def parse_max_hops(value: str | None, log: Any = None) -> int:
    """An integer > 0; unset/empty → 6 silently, anything else malformed → 6 with a warning."""
    if value is None or not value.strip():
        return DEFAULT_MAX_HOPS
    try:
        hops = int(value.strip())
    except ValueError:
        hops = 0
    if hops > 0:
        return hops
    warn_malformed(log or _log, "SLACK_A2A_MAX_HOPS", value, "an integer > 0", DEFAULT_MAX_HOPS)
    return DEFAULT_MAX_HOPS


class A2AConfigSource:
    """``SLACK_A2A_ROOMS``/``SLACK_A2A_MAX_HOPS`` with a TTL cache.

    Called on every bot message, so a cached ``get()`` is one clock read and a compare.
    After the TTL the file is re-read, so an operator's edit (or ``open-a2a-room``)
    takes effect without a restart. The environment still wins over the file.
    """

    KEYS = ("SLACK_A2A_ROOMS", "SLACK_A2A_MAX_HOPS")

    def __init__(
        self,
        env_file: Path,
        environ: Mapping[str, str] | None = None,
        ttl: float = DEFAULT_A2A_TTL,
        clock: Callable[[], float] = time.monotonic,
        *,
        log: Any = None,
        seed: tuple[tuple[str | None, ...], A2AConfig] | None = None,
    ) -> None:
        """``seed``: the raw values and the config already read (at load, where a malformed
        value was reported): the first read parses again only if the text changed since."""
        self._env_file = Path(env_file)
        self._environ = environ
        self._ttl = ttl
        self._clock = clock
        self._log = log or _log
        self._value: A2AConfig | None = seed[1] if seed else None
        self._raw: tuple[str | None, ...] | None = seed[0] if seed else None
        # -inf: the first ``get`` reads the file (a seed is only what load time saw).
        self._loaded_at = -math.inf

    def get(self) -> A2AConfig:
        now = self._clock()
        if self._value is not None and now - self._loaded_at < self._ttl:
            return self._value
        return self._reload(now)

    def _read_raw(self) -> tuple[str | None, ...]:
        try:
            values = read_env_file(self._env_file)
        except ConfigError as exc:
            # A half-written or unreadable file must not stop the fleet: keys unset.
            self._log.warning("a2a config unreadable", path=str(self._env_file), error=str(exc))
            values = {}
        environ = os.environ if self._environ is None else self._environ
        for key in self.KEYS:
            if key in environ:
                values[key] = environ[key]
        return tuple(values.get(key) for key in self.KEYS)

    def _reload(self, now: float) -> A2AConfig:
        raw = self._read_raw()
        self._loaded_at = now
        if self._value is not None and raw == self._raw:
            return self._value
        # Parse (and warn about a malformed value) only when the text changed, not every TTL.
        rooms_raw, hops_raw = raw
        value = A2AConfig(parse_rooms(rooms_raw), parse_max_hops(hops_raw, self._log))
        if self._value is not None and value != self._value:
            self._log.info("a2a config reloaded", rooms=len(value.rooms), max_hops=value.max_hops)
        self._raw, self._value = raw, value
        return value
