"""Daily token accounting for the LLM back ends (``NANOSLACK_DAILY_TOKENS``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Protocol

import structlog

from nanoslack.agents.types import BudgetExhausted

log = structlog.get_logger("nanoslack.agents")


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


def check_budget(ledger: TokenLedger | None, instance: str, daily_tokens: int | None) -> None:
    """Raise ``BudgetExhausted`` before a model call once today's cap is spent."""
    if daily_tokens is None or ledger is None:
        return
    used = ledger.used_today(instance)
    if used >= daily_tokens:
        log.warning("budget exhausted", instance=instance, used=used, cap=daily_tokens)
        raise BudgetExhausted(f"daily token budget spent: {used} of {daily_tokens} tokens used today")


def record_usage(ledger: TokenLedger | None, instance: str, tokens: int) -> None:
    if ledger is not None and tokens > 0:
        ledger.add(instance, tokens)
