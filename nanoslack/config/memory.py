"""The keys of what an agent remembers (docs/memory.md, docs/configuration.md).

``NANOSLACK_HISTORY_CHARS`` (48,000): characters of an agent's own conversation replayed
per thread. ``NANOSLACK_MEMORY_CHARS`` (4,000): characters of notes per scope.
``NANOSLACK_CACHED_TOKEN_WEIGHT`` (0.1): how much a token read from a provider's prompt
cache counts toward the token budgets (0 to 1: a cache read is billed at a fraction).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nanoslack.config.values import positive_int, warn_malformed

DEFAULT_HISTORY_CHARS = 48_000
DEFAULT_MEMORY_CHARS = 4_000
DEFAULT_CACHED_TOKEN_WEIGHT = 0.1
NOTE_CHARS = 500  # one note, at most (fixed, not a key)


@dataclass(frozen=True)
class MemorySettings:
    history_chars: int = DEFAULT_HISTORY_CHARS
    memory_chars: int = DEFAULT_MEMORY_CHARS
    cached_token_weight: float = DEFAULT_CACHED_TOKEN_WEIGHT

    def billed(self, tokens: int, cached: int) -> int:
        """The tokens a model call counts toward budgets: its cache reads at their weight."""
        cached = min(max(0, cached), max(0, tokens))
        return max(0, tokens) - cached + round(cached * self.cached_token_weight)


def parse_memory_settings(env: Mapping[str, str], log: Any) -> MemorySettings:
    return MemorySettings(
        history_chars=positive_int(env, "NANOSLACK_HISTORY_CHARS", DEFAULT_HISTORY_CHARS, log),
        memory_chars=positive_int(env, "NANOSLACK_MEMORY_CHARS", DEFAULT_MEMORY_CHARS, log),
        cached_token_weight=_weight(env, log),
    )


def _weight(env: Mapping[str, str], log: Any) -> float:
    key = "NANOSLACK_CACHED_TOKEN_WEIGHT"
    raw = env.get(key, "").strip()
    if not raw:
        return DEFAULT_CACHED_TOKEN_WEIGHT
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if 0.0 <= value <= 1.0:
        return value
    warn_malformed(log, key, raw, "a number from 0 to 1", DEFAULT_CACHED_TOKEN_WEIGHT)
    return DEFAULT_CACHED_TOKEN_WEIGHT
