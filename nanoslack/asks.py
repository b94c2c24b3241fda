"""The one way to ask an owner (sender approvals: docs/architecture.md; room control:
docs/operations.md; tool approvals: docs/agents.md).

An ask is a question with its choices: "may eli talk to dana?" (Allow / Deny), "resume
this room?" (Resume), "this room spent its budget" (Allow 1× more / Stop for today).
``OwnerAsks.open`` puts it to every owner, one DM each (outbox rows with purpose
``ask``); the first answer decides (``close``: one guarded update) and every owner's DM
is updated to say who decided and how. Who may answer is checked in one place,
``authorize``.

The core says what to ask; the edge (``nanoslack.slack.blocks``) renders the DM as
Block Kit buttons and turns a click back into an ``Answer`` (the choice and the ask's
``ref``). Each kind's meaning stays with its owner: the gate decides approvals, room
control resumes rooms, the budgets grant tokens; the instance's core routes an answer
to the right one (``nanoslack.core``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from nanoslack import mrkdwn
from nanoslack.logs import get_logger
from nanoslack.store import AskRow, Store

log = get_logger(__name__)

# Who answers when the operator does, from the command line (``nanoslack senders
# approve``, ``nanoslack resume``): always allowed.
OPERATOR = "cli"
# The choice recorded on an ask nobody answered in time (``OwnerAsks.expire``).
EXPIRED = "expired"


@dataclass(frozen=True, slots=True)
class Choice:
    id: str  # unique across kinds: a click names it (the edge's action id carries it)
    label: str
    style: str | None = None  # "primary" | "danger": how the button looks


@dataclass(frozen=True, slots=True)
class AskKind:
    name: str
    choices: tuple[Choice, ...]
    # How operators grep a refused click of this kind: "<label> click refused".
    label: str


APPROVAL = AskKind(
    "approval", (Choice("approve", "Allow", "primary"), Choice("deny", "Deny", "danger")), "approval"
)
HALT = AskKind("halt", (Choice("resume", "Resume", "primary"),), "resume")
BUDGET = AskKind(
    "budget",
    (Choice("budget_allow", "Allow 1× more", "primary"), Choice("budget_stop", "Stop for today", "danger")),
    "budget",
)
# May this MCP tool call run? (``"approval": "owner"``, ``nanoslack.tools.approvals``)
TOOL = AskKind(
    "tool", (Choice("tool_allow", "Allow", "primary"), Choice("tool_deny", "Deny", "danger")), "tool approval"
)
# Never asked in a DM: the routine buttons of an owner's Home (docs/agent-surface.md), answered
# and checked as every owner's click is; the ref is the routine's name.
ROUTINE = AskKind(
    "routine",
    (
        Choice("routine_run", "Run now", "primary"),
        Choice("routine_pause", "Pause"),
        Choice("routine_resume", "Resume", "primary"),
    ),
    "routine",
)
KINDS: dict[str, AskKind] = {kind.name: kind for kind in (APPROVAL, HALT, BUDGET, TOOL, ROUTINE)}
_BY_CHOICE: dict[str, AskKind] = {c.id: kind for kind in KINDS.values() for c in kind.choices}


def kind_of_choice(choice: str) -> AskKind | None:
    return _BY_CHOICE.get(choice)


@dataclass(frozen=True, slots=True)
class Answer:
    """An owner's click as the edge hands it in."""

    choice: str  # a Choice.id
    ref: str  # the ask's ref (the button's value)
    by_user: str  # the clicking Slack user (U…)

    @property
    def kind(self) -> AskKind | None:
        return kind_of_choice(self.choice)


class NotAnOwner(PermissionError):
    """Only an owner (or the operator CLI) may answer an owner ask."""


def who(by_user: str) -> str:
    """The one who answered, as the DMs and notices name them."""
    return "the operator" if by_user == OPERATOR else mrkdwn.user(by_user)


def by_id(by_user: str) -> str:
    """The one who answered, as the store records them (``users.id`` form)."""
    return by_user if by_user == OPERATOR else f"slack:{by_user}"


class OwnerAsks:
    """One instance's questions to the owners."""

    def __init__(self, store: Store, *, instance: str, owners: Sequence[str]) -> None:
        self._store = store
        self.instance = instance
        self.owners = tuple(owners)
        self._owner_set = frozenset(self.owners)

    def is_owner(self, user: str | None) -> bool:
        return user is not None and user in self._owner_set

    def authorize(self, by_user: str) -> None:
        """The one owner check: raises ``NotAnOwner`` unless ``by_user`` may answer."""
        if by_user != OPERATOR and not self.is_owner(by_user):
            raise NotAnOwner(f"{by_user} is not an owner (SLACK_OWNER); only owners answer")

    def authorize_operator(self, by_user: str) -> None:
        """Reversing an answer already given is the operator's alone."""
        if by_user != OPERATOR:
            raise NotAnOwner("only the operator CLI may reverse an answer")

    def open(
        self, kind: AskKind, ref: str, question: str, *, detail: str | None = None, text: str = ""
    ) -> bool:
        """Ask every owner, one DM each; False when this ask is already open (another
        instance asked first) or there is nobody to ask. ``text`` is the DM's plain
        notification text (default: the question)."""
        if not self.owners:
            return False
        ask_id = self._store.asks.open(
            kind=kind.name, ref=ref, instance=self.instance, question=question, detail=detail
        )
        if ask_id is None:
            return False
        for owner in self.owners:
            self._store.outbox.enqueue(
                instance=self.instance,
                dedupe_key=f"ask:{ask_id}:{owner}",
                purpose="ask",
                ask_id=ask_id,
                dm_user=owner,
                text=text or question,
            )
        return True

    def close(self, kind: AskKind, ref: str, *, choice: str, by_user: str, verdict: str) -> bool:
        """The answer: the open ask is closed and every owner's DM updated (withdrawn if
        not sent yet). False when no ask was open (answered already, or never asked)."""
        ask = self._store.asks.open_for(kind.name, ref)
        if ask is None or not self._store.asks.answer(
            ask.id, choice=choice, by=by_id(by_user), verdict=verdict
        ):
            return False
        self._update_dms(ask, verdict)
        return True

    def expire(self, kind: AskKind, ref: str, *, verdict: str) -> bool:
        """Nobody answered in time: the ask is closed without a choice (``expired``) and
        every owner's DM says so. False when an answer landed first."""
        ask = self._store.asks.open_for(kind.name, ref)
        if ask is None or not self._store.asks.answer(ask.id, choice=EXPIRED, by="timeout", verdict=verdict):
            return False
        self._update_dms(ask, verdict)
        return True

    def reverse(self, kind: AskKind, ref: str, *, choice: str, by_user: str, verdict: str) -> bool:
        """The operator changed an earlier answer: the DMs say the new one."""
        ask = self._store.asks.latest(kind.name, ref)
        if ask is None or ask.is_open:
            return self.close(kind, ref, choice=choice, by_user=by_user, verdict=verdict)
        if not self._store.asks.answer(ask.id, choice=choice, by=by_id(by_user), verdict=verdict, again=True):
            return False
        self._update_dms(ask, verdict)
        return True

    def _update_dms(self, ask: AskRow, verdict: str) -> None:
        # Each answer is its own update (the operator may reverse one): the key says when.
        stamp = f"{time.time():.6f}"
        for dm in self._store.outbox.asking(ask.id):
            self._store.outbox.update_post(
                dm, dedupe_key=f"{dm.dedupe_key}:answer:{stamp}", text=f"{ask.question} {verdict}"
            )
