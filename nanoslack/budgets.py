"""Budgets that pause and ask, in tokens and in US dollars (docs/operations.md, docs/agents.md).

Two budgets, each asking the owners the same way (``nanoslack.asks``, kind ``budget``), each
kept in two units: tokens and dollars (a step's ``cost_usd``, ``nanoslack.agents.prices``).

- ``RoomBudget``: a room's turns, every instance together, may spend
  ``NANOSLACK_ROOM_TOKENS`` tokens and ``NANOSLACK_ROOM_USD`` dollars per UTC day (the
  ``turns`` rows' tokens; their steps' prices). When either is spent the room pauses:
  its messages stay pending and no turn starts there. One instance (the one whose notice
  row lands) tells the room and asks every owner **Allow 1× more** / **Stop for today**;
  Allow raises that day's cap to what was spent plus one more budget.
- ``InstanceBudget``: an instance's ``NANOSLACK_DAILY_TOKENS`` and ``NANOSLACK_DAILY_USD``
  (enforced before each model call, ``tools.toolbox.TurnBudget``, through ``StoreLedger``)
  ask when a turn is refused for one; Allow forgives what it spent so far that day in
  that unit, so it gets one more day's budget.

Amounts are whole numbers: tokens, or millionths of a dollar (``micros``), so a grant
(``budget_grants.allowed``) and an ask's ref keep either. ``Budgets`` routes an owner's
answer to the budget and unit it is about (the ask's ref says).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Protocol

from nanoslack import mrkdwn
from nanoslack.asks import BUDGET, OwnerAsks, by_id, who
from nanoslack.logs import get_logger
from nanoslack.store import Store
from nanoslack.store.turns import utc_day

log = get_logger(__name__)

BUDGET_EXHAUSTED = "budget exhausted"


@dataclass(frozen=True, slots=True)
class Unit:
    """What a budget counts: ``tokens``, or ``usd`` in millionths of a dollar."""

    name: str  # tokens | usd: ``BudgetExhausted.unit``
    suffix: str  # of a grant's scope and an ask's ref: "" | "_usd"
    budget: str  # how the texts name it: "token budget" | "dollar budget"
    keys: tuple[str, str]  # the caps' keys: the instance's, the room's

    def show(self, amount: int) -> str:
        return usd(amount / 1e6) if self.name == "usd" else f"{amount} tokens"


TOKENS = Unit("tokens", "", "token budget", ("NANOSLACK_DAILY_TOKENS", "NANOSLACK_ROOM_TOKENS"))
USD = Unit("usd", "_usd", "dollar budget", ("NANOSLACK_DAILY_USD", "NANOSLACK_ROOM_USD"))
UNITS = {unit.name: unit for unit in (TOKENS, USD)}

ROOM_TEXT = "⏸️ Paused: this room's {budget} for today is spent. The owners have been asked."
INSTANCE_ASK_TEXT = "*{instance}* spent its daily {budget} ({key}). Let it go on?"
ASK_TEXT = "{room} spent its {budget} for today ({used} of {limit}). Let it go on?"


def usd(dollars: float) -> str:
    """Dollars as people read them: cents, or four decimals below a dollar."""
    return f"${dollars:,.2f}" if dollars >= 1 else f"${dollars:.4f}"


def micros(dollars: float) -> int:
    return round(dollars * 1_000_000)


class DollarLedger(Protocol):
    """What an instance spent in dollars today, less what its owners forgave."""

    def usd_today(self, instance: str) -> float: ...


@dataclass(frozen=True, slots=True)
class BudgetRef:
    """Which budget an ask is about: a room's or an instance's, which day, which cap ran
    out (for an instance: the grant in force when it did) and in which unit. Its
    ``value`` is the ask's ref, so an answer names exactly the cap it answers."""

    scope: str  # "room" | "instance"
    subject: str  # the conversation id, or the instance name
    day: str
    limit: int  # in the unit's amounts
    unit: Unit = TOKENS

    @property
    def grant_scope(self) -> str:
        """``budget_grants.scope``: room, instance, room_usd, instance_usd."""
        return self.scope + self.unit.suffix

    @property
    def value(self) -> str:
        return f"{self.grant_scope}|{self.subject}|{self.day}|{self.limit}"

    @classmethod
    def parse(cls, value: str) -> BudgetRef | None:
        parts = value.split("|")
        if len(parts) != 4 or not parts[3].isdigit():
            return None
        scope, _, unit = parts[0].partition("_")
        if scope not in ("room", "instance") or (unit or "tokens") not in UNITS:
            return None
        return cls(scope, parts[1], parts[2], int(parts[3]), UNITS[unit or "tokens"])


def _verdict(allow: bool, by_user: str) -> str:
    return f"{'Allowed 1× more' if allow else 'Stopped for today'} by {who(by_user)}."


class RoomBudget:
    """``NANOSLACK_ROOM_TOKENS`` and ``NANOSLACK_ROOM_USD`` for the rooms one instance takes
    turns in."""

    def __init__(
        self, store: Store, asks: OwnerAsks, *, cap: int | None, usd_cap: float | None = None
    ) -> None:
        self._store = store
        self._asks = asks
        self.cap = cap
        self.usd_cap = usd_cap
        self._caps = [
            (unit, limit)
            for unit, limit in ((TOKENS, cap), (USD, None if usd_cap is None else micros(usd_cap)))
            if limit is not None
        ]

    def capped(self, unit: Unit) -> bool:
        return any(capped is unit for capped, _ in self._caps)

    def paused(self, room: str) -> bool:
        """Whether the room is paused for its budget; the first instance to see it asks."""
        return self.spent(room) is not None

    def spent(self, room: str) -> Unit | None:
        """The unit whose budget pauses the room (None: it may go on)."""
        if not self._caps:
            return None
        day = utc_day()
        for unit, cap in self._caps:
            used = self._used(unit, room)
            ref = BudgetRef("room", room, day, cap, unit)
            grant = self._store.grants.get(ref.grant_scope, room, day)
            limit = max(cap, grant.allowed)
            if grant.stopped_by is None and used < limit:
                continue
            if grant.stopped_by is None:
                self._ask(BudgetRef("room", room, day, limit, unit), used)
            return unit
        return None

    def _used(self, unit: Unit, room: str) -> int:
        if unit is USD:
            return micros(self._store.steps.room_cost_usd(room, since=_day_start()))
        return self._store.turns.room_tokens(room, since=_day_start())

    def _ask(self, ref: BudgetRef, used: int) -> None:
        with self._store.transaction():
            # The room notice's key is the claim: one instance tells the room and asks.
            told = self._store.outbox.enqueue(
                instance=self._asks.instance,
                dedupe_key=f"budget:{ref.grant_scope}:{ref.subject}:{ref.day}:{ref.limit}",
                purpose="notice",
                channel=ref.subject,
                text=ROOM_TEXT.format(budget=ref.unit.budget),
            )
            if told is None:
                return
            question = ASK_TEXT.format(
                room=mrkdwn.room(ref.subject),
                budget=ref.unit.budget,
                used=ref.unit.show(used),
                limit=ref.unit.show(ref.limit),
            )
            self._asks.open(BUDGET, ref.value, question)
        log.warning(
            BUDGET_EXHAUSTED,
            instance=self._asks.instance,
            room=ref.subject,
            unit=ref.unit.name,
            used=used,
            limit=ref.limit,
        )

    def answer(self, ref: BudgetRef, *, allow: bool, by_user: str) -> None:
        if allow:
            used = self._used(ref.unit, ref.subject)
            cap = next(limit for unit, limit in self._caps if unit is ref.unit)
            self._store.grants.allow(ref.grant_scope, ref.subject, ref.day, up_to=max(used, ref.limit) + cap)
        else:
            self._store.grants.stop(ref.grant_scope, ref.subject, ref.day, by=by_id(by_user))


class InstanceBudget:
    """One instance's ``NANOSLACK_DAILY_TOKENS`` and ``NANOSLACK_DAILY_USD``, as far as asking
    the owners goes (a turn is refused past either before its next model call)."""

    def __init__(self, store: Store, asks: OwnerAsks) -> None:
        self._store = store
        self._asks = asks
        self.instance = asks.instance

    def spent(self, unit: Unit = TOKENS) -> None:
        """A turn was refused for the daily cap in ``unit``: ask the owners, once per grant."""
        day = utc_day()
        ref = BudgetRef("instance", self.instance, day, 0, unit)
        grant = self._store.grants.get(ref.grant_scope, self.instance, day)
        if grant.stopped_by is not None:
            return
        ref = BudgetRef("instance", self.instance, day, grant.allowed, unit)
        question = INSTANCE_ASK_TEXT.format(instance=self.instance, budget=unit.budget, key=unit.keys[0])
        if self._asks.open(BUDGET, ref.value, question):
            log.warning(BUDGET_EXHAUSTED, instance=self.instance, scope="instance", unit=unit.name)

    def answer(self, ref: BudgetRef, *, allow: bool, by_user: str) -> None:
        if allow:
            # The grant is what is forgiven: what it spent so far, so the ledger sees
            # a fresh budget (one more day's worth).
            if ref.unit is USD:
                spent = micros(self._store.steps.instance_cost_usd(ref.subject, since=_day_start()))
            else:
                spent = self._store.turns.used_today(ref.subject)
            self._store.grants.allow(ref.grant_scope, ref.subject, ref.day, up_to=spent)
        else:
            self._store.grants.stop(ref.grant_scope, ref.subject, ref.day, by=by_id(by_user))


class Budgets:
    """Both budgets of one instance, and where an owner's answer about one goes."""

    def __init__(
        self, store: Store, asks: OwnerAsks, *, room_tokens: int | None, room_usd: float | None = None
    ) -> None:
        self._store = store
        self._asks = asks
        self.room = RoomBudget(store, asks, cap=room_tokens, usd_cap=room_usd)
        self.instance = InstanceBudget(store, asks)

    def answer(self, value: str, *, allow: bool, by_user: str) -> bool:
        """An owner's click; False when it came too late (another owner decided) or is
        about nothing this fleet keeps."""
        ref = BudgetRef.parse(value)
        if ref is None or (ref.scope == "room" and not self.room.capped(ref.unit)):
            return False
        budget: RoomBudget | InstanceBudget = self.room if ref.scope == "room" else self.instance
        choice = "budget_allow" if allow else "budget_stop"
        verdict = _verdict(allow, by_user)
        with self._store.transaction():
            if not self._asks.close(BUDGET, value, choice=choice, by_user=by_user, verdict=verdict):
                return False
            budget.answer(ref, allow=allow, by_user=by_user)
        log.info(
            "budget allowed" if allow else "budget stopped",
            instance=self._asks.instance,
            scope=ref.scope,
            unit=ref.unit.name,
            subject=ref.subject,
            by=by_user,
        )
        return True


class StoreLedger:
    """The LLM back ends' token ledger (``agents.TokenLedger``) and dollar ledger
    (``DollarLedger``), kept in the store so a restart does not refill a spent daily
    budget; an owner's "Allow 1× more" forgives what was spent before it
    (``InstanceBudget.answer``)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def used_today(self, instance: str) -> int:
        forgiven = self._store.grants.get("instance", instance, utc_day()).allowed
        return max(0, self._store.turns.used_today(instance) - forgiven)

    def add(self, instance: str, tokens: int) -> None:
        self._store.turns.add_usage(instance, tokens)

    def usd_today(self, instance: str) -> float:
        forgiven = self._store.grants.get("instance" + USD.suffix, instance, utc_day()).allowed
        spent = self._store.steps.instance_cost_usd(instance, since=_day_start())
        return max(0.0, spent - forgiven / 1e6)


def _day_start() -> float:
    now = dt.datetime.now(dt.UTC)
    return now.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
