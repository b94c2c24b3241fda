"""Token budgets that pause and ask (docs/operations.md).

Two budgets, each asking the owners the same way (``nanoslack.asks``, kind ``budget``):

- ``RoomBudget``: a room's turns, every instance together, may spend
  ``NANOSLACK_ROOM_TOKENS`` tokens per UTC day (the sum of the ``turns`` rows' tokens).
  When it is spent the room pauses: its messages stay pending and no turn starts
  there. One instance (the one whose notice row lands) tells the room and asks every
  owner **Allow 1× more** / **Stop for today**; Allow raises the day's cap to what was
  spent plus one more budget.
- ``InstanceBudget``: an instance's ``NANOSLACK_DAILY_TOKENS`` (enforced by the LLM back
  ends through ``StoreLedger``) asks when a turn is refused for it; Allow forgives what
  it spent so far that day, so it gets one more day's budget.

``Budgets`` routes an owner's answer to the budget it is about (the ask's ref says).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from nanoslack import mrkdwn
from nanoslack.asks import BUDGET, OwnerAsks, by_id, who
from nanoslack.logs import get_logger
from nanoslack.store import Store
from nanoslack.store.turns import utc_day

log = get_logger(__name__)

BUDGET_EXHAUSTED = "budget exhausted"
ROOM_TEXT = "⏸️ Paused: this room's token budget for today is spent. The owners have been asked."
INSTANCE_ASK_TEXT = "*{instance}* spent its daily token budget (NANOSLACK_DAILY_TOKENS). Let it go on?"
ASK_TEXT = "{room} spent its token budget for today ({used} of {limit} tokens). Let it go on?"


@dataclass(frozen=True, slots=True)
class BudgetRef:
    """Which budget an ask is about: a room's or an instance's, which day, and which cap
    ran out (for an instance: the grant in force when it did). Its ``value`` is the
    ask's ref, so an answer names exactly the cap it answers."""

    scope: str  # "room" | "instance"
    subject: str  # the conversation id, or the instance name
    day: str
    limit: int

    @property
    def value(self) -> str:
        return f"{self.scope}|{self.subject}|{self.day}|{self.limit}"

    @classmethod
    def parse(cls, value: str) -> BudgetRef | None:
        parts = value.split("|")
        if len(parts) != 4 or parts[0] not in ("room", "instance") or not parts[3].isdigit():
            return None
        return cls(parts[0], parts[1], parts[2], int(parts[3]))


def _verdict(allow: bool, by_user: str) -> str:
    return f"{'Allowed 1× more' if allow else 'Stopped for today'} by {who(by_user)}."


class RoomBudget:
    """``NANOSLACK_ROOM_TOKENS`` for the rooms one instance takes turns in."""

    def __init__(self, store: Store, asks: OwnerAsks, *, cap: int | None) -> None:
        self._store = store
        self._asks = asks
        self.cap = cap

    def paused(self, room: str) -> bool:
        """Whether the room is paused for its budget; the first instance to see it asks."""
        if self.cap is None:
            return False
        day = utc_day()
        used = self._store.turns.room_tokens(room, since=_day_start())
        grant = self._store.grants.get("room", room, day)
        limit = max(self.cap, grant.allowed)
        if grant.stopped_by is None and used < limit:
            return False
        if grant.stopped_by is None:
            self._ask(BudgetRef("room", room, day, limit), used)
        return True

    def _ask(self, ref: BudgetRef, used: int) -> None:
        with self._store.transaction():
            # The room notice's key is the claim: one instance tells the room and asks.
            told = self._store.outbox.enqueue(
                instance=self._asks.instance,
                dedupe_key=f"budget:room:{ref.subject}:{ref.day}:{ref.limit}",
                purpose="notice",
                channel=ref.subject,
                text=ROOM_TEXT,
            )
            if told is None:
                return
            question = ASK_TEXT.format(room=mrkdwn.room(ref.subject), used=used, limit=ref.limit)
            self._asks.open(BUDGET, ref.value, question)
        log.warning(
            BUDGET_EXHAUSTED, instance=self._asks.instance, room=ref.subject, used=used, limit=ref.limit
        )

    def answer(self, ref: BudgetRef, *, allow: bool, by_user: str) -> None:
        if allow:
            used = self._store.turns.room_tokens(ref.subject, since=_day_start())
            self._store.grants.allow(
                "room", ref.subject, ref.day, up_to=max(used, ref.limit) + (self.cap or 0)
            )
        else:
            self._store.grants.stop("room", ref.subject, ref.day, by=by_id(by_user))


class InstanceBudget:
    """One instance's ``NANOSLACK_DAILY_TOKENS``, as far as asking the owners goes (the
    LLM back ends refuse a turn past it, through ``StoreLedger``)."""

    def __init__(self, store: Store, asks: OwnerAsks) -> None:
        self._store = store
        self._asks = asks
        self.instance = asks.instance

    def spent(self) -> None:
        """A turn was refused for the daily cap: ask the owners, once per grant."""
        day = utc_day()
        grant = self._store.grants.get("instance", self.instance, day)
        if grant.stopped_by is not None:
            return
        ref = BudgetRef("instance", self.instance, day, grant.allowed)
        if self._asks.open(BUDGET, ref.value, INSTANCE_ASK_TEXT.format(instance=self.instance)):
            log.warning(BUDGET_EXHAUSTED, instance=self.instance, scope="instance")

    def answer(self, ref: BudgetRef, *, allow: bool, by_user: str) -> None:
        if allow:
            # The grant is the tokens forgiven: what it spent so far, so the ledger sees
            # a fresh budget (one more day's worth).
            spent = self._store.turns.used_today(ref.subject)
            self._store.grants.allow("instance", ref.subject, ref.day, up_to=spent)
        else:
            self._store.grants.stop("instance", ref.subject, ref.day, by=by_id(by_user))


class Budgets:
    """Both budgets of one instance, and where an owner's answer about one goes."""

    def __init__(self, store: Store, asks: OwnerAsks, *, room_tokens: int | None) -> None:
        self._store = store
        self._asks = asks
        self.room = RoomBudget(store, asks, cap=room_tokens)
        self.instance = InstanceBudget(store, asks)

    def answer(self, value: str, *, allow: bool, by_user: str) -> bool:
        """An owner's click; False when it came too late (another owner decided) or is
        about nothing this fleet keeps."""
        ref = BudgetRef.parse(value)
        if ref is None or (ref.scope == "room" and self.room.cap is None):
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
            subject=ref.subject,
            by=by_user,
        )
        return True


class StoreLedger:
    """The LLM back ends' token ledger (``agents.TokenLedger``), kept in the store so a
    restart does not refill a spent daily budget; an owner's "Allow 1× more" forgives
    what was spent before it (``InstanceBudget.answer``)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def used_today(self, instance: str) -> int:
        forgiven = self._store.grants.get("instance", instance, utc_day()).allowed
        return max(0, self._store.turns.used_today(instance) - forgiven)

    def add(self, instance: str, tokens: int) -> None:
        self._store.turns.add_usage(instance, tokens)


def _day_start() -> float:
    now = dt.datetime.now(dt.UTC)
    return now.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
