"""``nanoslack spend [--days N]``: what the agents' turns spent, in tokens and US dollars, per
instance, per conversation and per routine, beside the daily caps that bound each
(docs/operations.md "Spend"). Days are UTC days; ``--days 1`` (the default) is today.

Tokens are counted as the budgets count them (cache reads at
``NANOSLACK_CACHED_TOKEN_WEIGHT``); dollars are the steps' prices (``turn_steps.cost_usd``,
``genai-prices``). A model the price table does not know adds tokens but no dollars: its
calls are counted under ``unpriced``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from nanoslack.budgets import usd
from nanoslack.config import ConfigError, split_list, teammates_dir
from nanoslack.config.agent import InstanceKeys, daily_tokens, daily_usd
from nanoslack.inbound import is_dm_channel
from nanoslack.ops.admin import _parser, _run, table
from nanoslack.routines import spec as routine_spec
from nanoslack.store import Store
from nanoslack.store.steps import SpendRow

DAY_S = 86_400


@dataclass
class _Total:
    turns: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    unpriced: int = 0

    def add(self, row: SpendRow) -> None:
        self.turns += row.turns
        self.tokens += row.tokens
        self.cost_usd += row.cost_usd
        self.unpriced += row.unpriced


def since_utc_day(days: int, now: float | None = None) -> float:
    """The start of the UTC day ``days - 1`` days before today."""
    now = time.time() if now is None else now
    return (now // DAY_S - (days - 1)) * DAY_S


def _spend(store: Store, args: argparse.Namespace, env: dict[str, str], out: TextIO) -> int:
    since = since_utc_day(args.days)
    rows = store.steps.spend(since=since)
    lookup = _lookup(env)
    day = time.strftime("%Y-%m-%d", time.gmtime(since))
    out.write(f"spend since {day} 00:00 UTC ({'today' if args.days == 1 else f'{args.days} days'});")
    out.write(" caps are per UTC day\n\n")

    instances = _totals(rows, lambda r: r.instance, start=_configured(env))
    table(
        out,
        ("INSTANCE", "TURNS", "TOKENS", "TOKEN CAP", "USD", "USD CAP", "UNPRICED"),
        [
            (name, *_spent(t, *_instance_caps(lookup, name), capped=True), t.unpriced)
            for name, t in instances.items()
        ],
        "no instances configured and no turns",
    )
    out.write("\n")
    room_tokens, room_usd = _room_caps(lookup)
    rooms = _totals(rows, lambda r: r.channel)
    table(
        out,
        ("CONVERSATION", "TURNS", "TOKENS", "TOKEN CAP", "USD", "USD CAP", "UNPRICED"),
        [
            (channel, *_spent(t, room_tokens, room_usd, capped=not is_dm_channel(channel)), t.unpriced)
            for channel, t in rooms.items()
        ],
        "no turns",
    )
    out.write("\n")
    routines = _totals((r for r in rows if r.routine), lambda r: f"{r.instance}/{r.routine}")
    # The routines' files where the fleet reads them (``run``'s rule, over this command's env).
    teammates = teammates_dir(args.env_file, env)
    routine_caps = _routine_caps(teammates, {key.split("/")[0] for key in routines})
    table(
        out,
        ("ROUTINE", "TURNS", "TOKENS", "TOKEN CAP", "USD", "UNPRICED"),
        [
            (key, t.turns, t.tokens, _cap(routine_caps.get(key)), usd(t.cost_usd), t.unpriced)
            for key, t in routines.items()
        ],
        "no routine runs",
    )
    return 0


def _totals(
    rows: Iterable[SpendRow], key: Callable[[SpendRow], str], start: Iterable[str] = ()
) -> dict[str, _Total]:
    totals = {name: _Total() for name in start}
    for row in rows:
        totals.setdefault(key(row), _Total()).add(row)
    return totals


def _instance_caps(lookup: Callable[[str], str | None], instance: str) -> tuple[int | None, float | None]:
    """An instance's daily caps; a malformed one reads as none (the fleet refuses to run it)."""
    try:
        tokens = daily_tokens(lookup, instance)
    except ConfigError:
        tokens = None
    try:
        dollars = daily_usd(lookup, instance)
    except ConfigError:
        dollars = None
    return tokens, dollars


def _spent(t: _Total, tokens_cap: int | None, usd_cap: float | None, *, capped: bool) -> tuple[object, ...]:
    if not capped:  # a DM: the room budgets do not apply
        return t.turns, t.tokens, "", usd(t.cost_usd), ""
    return t.turns, t.tokens, _cap(tokens_cap), usd(t.cost_usd), _cap(usd_cap, money=True)


def _cap(value: float | None, *, money: bool = False) -> str:
    if value is None:
        return "none"
    return usd(value) if money else str(value)


def _room_caps(lookup: Callable[[str], str | None]) -> tuple[int | None, float | None]:
    # The bare keys, parsed as the per-instance ones are (the "default" instance reads
    # the bare key only); a malformed one reads as no cap, as the fleet runs it.
    keys = InstanceKeys(lookup, "default")
    try:
        tokens = keys.positive_int("NANOSLACK_ROOM_TOKENS")
    except ConfigError:
        tokens = None
    try:
        dollars = keys.positive_number("NANOSLACK_ROOM_USD", "US dollars > 0")
    except ConfigError:
        dollars = None
    return tokens, dollars


def _routine_caps(teammates: Path, instances: Iterable[str]) -> dict[str, int | None]:
    caps: dict[str, int | None] = {}
    for instance in instances:
        loaded = routine_spec.load(routine_spec.routines_path(teammates, instance), instance)
        caps.update({f"{instance}/{r.name}": r.daily_tokens for r in loaded.routines})
    return caps


def _configured(env: dict[str, str]) -> tuple[str, ...]:
    names = split_list(env.get("SLACK_INSTANCES"))
    return tuple(n.lower() for n in names)


def _lookup(env: dict[str, str]) -> Callable[[str], str | None]:
    return lambda key: env.get(key) or None


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    p = _parser("spend", "Tokens and US dollars spent per instance, conversation and routine.")
    p.add_argument("--days", type=_days, default=1, help="UTC days to count, today's included (default 1)")
    p.set_defaults(handler=_spend)
    return _run("spend", argv, p, out or sys.stdout)


def _days(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of days >= 1, got {value!r}")
    return int(value)
