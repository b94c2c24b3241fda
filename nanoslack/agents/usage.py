"""Daily token accounting for the LLM back ends (``NANOSLACK_DAILY_TOKENS``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Protocol


class TokenLedger(Protocol):
    def used_today(self, instance: str) -> int: ...

    def add(self, instance: str, tokens: int) -> None: ...


def _utc_today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


class MemoryLedger:
    """Per-process ledger (tests, and a cap with no store behind it). Days are UTC."""

    def __init__(self, today: Callable[[], dt.date] = _utc_today) -> None:
        self._today = today
        self._used: dict[tuple[str, dt.date], int] = {}

    def used_today(self, instance: str) -> int:
        return self._used.get((instance, self._today()), 0)

    def add(self, instance: str, tokens: int) -> None:
        key = (instance, self._today())
        self._used[key] = self._used.get(key, 0) + max(0, tokens)
