"""What an instance's Home tab shows (docs/agent-surface.md, "The owner's Home"): the core
says what is there, the edge renders it (``nanoslack.slack.home``) and publishes it.

An owner's Home: the instance's rooms (a halted one with a Resume button), the questions
it has open for the owners (a sender's or a tool call's Allow/Deny, a spent budget's
Allow 1× more / Stop for today), today's tokens and dollars against its daily caps, its
routines (Run now, Pause or Resume) and how many notes it keeps of each scope. Anyone
else sees the teammate's description and how to talk to it.

Every button is one the owners' DMs have (``nanoslack_<choice>``, the ask's ref as its
value) or a routine's (``asks.ROUTINE``): a click goes to the click router
(``nanoslack.clicks``), which checks ``SLACK_OWNER`` again and does what the CLI does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from nanoslack.agents.describe import teammate_description
from nanoslack.asks import HALT, OwnerAsks
from nanoslack.halts import Halts
from nanoslack.store import AskRow, Store


@dataclass(frozen=True, slots=True)
class HomeRoom:
    channel: str
    name: str | None
    halted: bool


@dataclass(frozen=True, slots=True)
class HomeRoutine:
    name: str
    schedule: str
    channel: str
    paused: bool
    next_due: float | None
    last_status: str | None


@dataclass(frozen=True, slots=True)
class HomeSpend:
    tokens: int
    token_cap: int | None
    usd: float
    usd_cap: float | None


@dataclass(frozen=True, slots=True)
class OwnerHome:
    instance: str
    rooms: tuple[HomeRoom, ...]
    asks: tuple[AskRow, ...]  # open, halts aside (their room's Resume says it)
    spend: HomeSpend
    routines: tuple[HomeRoutine, ...]
    notes: tuple[tuple[str, int], ...]  # (scope, notes kept)


@dataclass(frozen=True, slots=True)
class VisitorHome:
    instance: str
    description: str


@dataclass(frozen=True)
class Spending:
    """Today's spend and the daily caps of one instance (the budgets' own readers)."""

    tokens_today: Callable[[], int] = lambda: 0
    usd_today: Callable[[], float] = lambda: 0.0
    token_cap: int | None = None
    usd_cap: float | None = None


class HomeSource:
    """One instance's Home, read from the store each time it is asked."""

    def __init__(
        self,
        store: Store,
        asks: OwnerAsks,
        halts: Halts,
        *,
        teammates_dir: Path,
        spending: Spending | None = None,
    ) -> None:
        self._store = store
        self._asks = asks
        self._halts = halts
        self.instance = asks.instance
        self._teammates_dir = teammates_dir
        self._spending = spending or Spending()

    def is_owner(self, user: str) -> bool:
        return self._asks.is_owner(user)

    def for_user(self, user: str) -> OwnerHome | VisitorHome:
        return self.owner_home() if self.is_owner(user) else self.visitor_home()

    def visitor_home(self) -> VisitorHome:
        return VisitorHome(self.instance, teammate_description(self._teammates_dir, self.instance))

    def owner_home(self) -> OwnerHome:
        spending = self._spending
        return OwnerHome(
            instance=self.instance,
            rooms=self._rooms(),
            asks=tuple(a for a in self._store.asks.open_of(self.instance) if a.kind != HALT.name),
            spend=HomeSpend(
                spending.tokens_today(), spending.token_cap, spending.usd_today(), spending.usd_cap
            ),
            routines=self._routines(),
            notes=_note_counts(self._store.memories.usage(self.instance)),
        )

    def _rooms(self) -> tuple[HomeRoom, ...]:
        """The instance's rooms (its group conversations), and any room whose halt it announced."""
        halted = {h.room: h for h in self._halts.halted()}
        rooms = {
            g.platform_id.removeprefix("slack:"): g.name
            for g in self._store.groups.list()
            if g.instance == self.instance and not g.is_dm
        }
        for room, halt in halted.items():
            if halt.instance == self.instance:
                rooms.setdefault(room, None)
        return tuple(HomeRoom(room, name, room in halted) for room, name in sorted(rooms.items()))

    def _routines(self) -> tuple[HomeRoutine, ...]:
        return tuple(
            HomeRoutine(r.name, r.schedule, r.channel, r.paused, r.next_due, r.last_status)
            for r in self._store.routines.listing()
            if r.instance == self.instance and r.active
        )


def _note_counts(usage: Sequence[tuple[str, str, int, int]]) -> tuple[tuple[str, int], ...]:
    counts: dict[str, int] = {}
    for scope, _conversation, _chars, notes in usage:
        counts[scope] = counts.get(scope, 0) + notes
    return tuple(sorted(counts.items()))
