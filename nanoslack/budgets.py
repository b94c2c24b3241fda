"""Token budgets that pause and ask (DESIGN §5 "Room control").

A room's turns, every instance together, may spend ``NANOSLACK_ROOM_TOKENS`` tokens per
UTC day (the sum of the ``turns`` rows' tokens). When it is spent the room pauses: its
messages stay pending and no turn starts there. One instance (the store decides, as for
the pause notice) tells the room and DMs every owner **Allow 1× more** / **Stop for
today**. Allow raises the day's cap to what was spent plus one more budget; the first
click decides and every owner's DM is updated to say who did.

An instance's ``NANOSLACK_DAILY_TOKENS`` (enforced by the LLM back ends) asks the same
way when a turn is refused for it; Allow forgives what it spent so far that day
(``StoreLedger`` subtracts the grant), so it gets one more day's budget.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nanoslack.logs import get_logger
from nanoslack.store import Store
from nanoslack.store.turns import utc_day

log = get_logger(__name__)

BUDGET_EXHAUSTED = "budget exhausted"
ALLOW_ACTION_ID = "nanoslack_budget_allow"
STOP_ACTION_ID = "nanoslack_budget_stop"
ROOM_TEXT = "⏸️ Paused: this room's token budget for today is spent. The owners have been asked."
INSTANCE_ASK_TEXT = "*{instance}* spent its daily token budget (NANOSLACK_DAILY_TOKENS). Let it go on?"
ASK_TEXT = "{room} spent its token budget for today ({used} of {limit} tokens). Let it go on?"


@dataclass(frozen=True, slots=True)
class Ask:
    """What a budget button carries: which budget (a room's, or an instance's), which
    day, which cap ran out (for an instance: the grant in force when it did)."""

    room: str  # the conversation id, or the instance name for scope "instance"
    day: str
    limit: int
    scope: str = "room"

    @property
    def value(self) -> str:
        return f"{self.scope}|{self.room}|{self.day}|{self.limit}"

    @classmethod
    def parse(cls, value: str) -> Ask | None:
        parts = value.split("|")
        if len(parts) != 4 or parts[0] not in ("room", "instance") or not parts[3].isdigit():
            return None
        return cls(parts[1], parts[2], int(parts[3]), parts[0])

    @property
    def notice_room(self) -> str:
        return self.room if self.scope == "room" else f"instance:{self.room}"

    def dm_key(self, owner: str) -> str:
        return f"budget:{self.scope}:{self.room}:{self.day}:{self.limit}:{owner}"


class RoomBudget:
    def __init__(
        self, store: Store, *, instance: str, owners: Sequence[str], room_tokens: int | None
    ) -> None:
        self._store = store
        self.instance = instance
        self.owners = tuple(owners)
        self.cap = room_tokens
        self._posted = False

    def take_posted(self) -> bool:
        posted, self._posted = self._posted, False
        return posted

    def exhausted(self, room: str) -> bool:
        """Whether the room is paused for its budget; the first instance to see it asks."""
        if self.cap is None:
            return False
        day = utc_day()
        rooms = self._store.rooms
        used = rooms.room_tokens(room, since=_day_start())
        grant = rooms.grant("room", room, day)
        limit = max(self.cap, grant.allowed)
        if grant.stopped_by is None and used < limit:
            return False
        if grant.stopped_by is None:
            self._ask(Ask(room, day, limit), used)
        return True

    def _ask(self, ask: Ask, used: int) -> None:
        with self._store.transaction():
            if not self._store.rooms.claim_notice(
                ask.room, "budget", f"{ask.day}:{ask.limit}", instance=self.instance
            ):
                return
            self._enqueue(f"budget:room:{ask.room}:{ask.day}:{ask.limit}", channel=ask.room, text=ROOM_TEXT)
            text = ASK_TEXT.format(room=f"<#{ask.room}>", used=used, limit=ask.limit)
            for owner in self.owners:
                self._enqueue(ask.dm_key(owner), dm_user=owner, text=text, blocks=_ask_blocks(ask, text))
        log.warning(BUDGET_EXHAUSTED, instance=self.instance, room=ask.room, used=used, limit=ask.limit)

    def decide(self, value: str, *, allow: bool, by_user: str) -> bool:
        """An owner's click; False when it came too late (another owner decided)."""
        ask = Ask.parse(value)
        if ask is None or (ask.scope == "room" and self.cap is None):
            return False
        rooms = self._store.rooms
        with self._store.transaction():
            epoch = f"{ask.day}:{ask.limit}"
            if not rooms.claim_notice(ask.notice_room, "budget-answer", epoch, instance=self.instance):
                return False
            if not allow:
                rooms.stop(ask.scope, ask.room, ask.day, by=f"slack:{by_user}")
            elif ask.scope == "room" and self.cap is not None:
                used = rooms.room_tokens(ask.room, since=_day_start())
                rooms.allow("room", ask.room, ask.day, up_to=max(used, ask.limit) + self.cap)
            else:
                # An instance's grant is the tokens forgiven: what it spent so far, so
                # the ledger sees a fresh budget (one more day's worth).
                rooms.allow("instance", ask.room, ask.day, up_to=self._store.turns.used_today(ask.room))
            self._close(ask, allow, by_user)
        log.info(
            "budget allowed" if allow else "budget stopped",
            instance=self.instance,
            scope=ask.scope,
            subject=ask.room,
            by=by_user,
        )
        return True

    def instance_exhausted(self) -> None:
        """This instance's NANOSLACK_DAILY_TOKENS is spent: ask the owners, once per grant."""
        day = utc_day()
        grant = self._store.rooms.grant("instance", self.instance, day)
        if grant.stopped_by is not None:
            return
        ask = Ask(self.instance, day, grant.allowed, scope="instance")
        with self._store.transaction():
            epoch = f"{day}:{grant.allowed}"
            if not self._store.rooms.claim_notice(ask.notice_room, "budget", epoch, instance=self.instance):
                return
            text = INSTANCE_ASK_TEXT.format(instance=self.instance)
            for owner in self.owners:
                self._enqueue(ask.dm_key(owner), dm_user=owner, text=text, blocks=_ask_blocks(ask, text))
        log.warning(BUDGET_EXHAUSTED, instance=self.instance, scope="instance")

    def _close(self, ask: Ask, allow: bool, by_user: str) -> None:
        verdict = f"{'Allowed 1× more' if allow else 'Stopped for today'} by <@{by_user}>"
        for owner in self.owners:
            key = ask.dm_key(owner)
            sent = self._store.outbox.get_by_key(key)
            if sent is not None and self._store.outbox.update_post(
                key,
                instance=sent.instance,
                dedupe_key=f"{key}:answer",
                text=f"{sent.text} {verdict}.",
                blocks=[
                    {"type": "section", "text": {"type": "mrkdwn", "text": sent.text}},
                    {"type": "context", "elements": [{"type": "mrkdwn", "text": verdict}]},
                ],
            ):
                self._posted = True

    def _enqueue(
        self,
        key: str,
        *,
        text: str,
        channel: str | None = None,
        dm_user: str | None = None,
        blocks: list[dict[str, Any]] | None = None,
    ) -> None:
        self._store.outbox.enqueue(
            instance=self.instance, dedupe_key=key, channel=channel, dm_user=dm_user, text=text, blocks=blocks
        )
        self._posted = True


def _day_start() -> float:
    now = dt.datetime.now(dt.UTC)
    return now.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()


def _ask_blocks(ask: Ask, text: str) -> list[dict[str, Any]]:
    def button(action_id: str, label: str, style: str) -> dict[str, Any]:
        return {
            "type": "button",
            "action_id": action_id,
            "style": style,
            "text": {"type": "plain_text", "text": label},
            "value": ask.value,
        }

    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": text}},
        {
            "type": "actions",
            "block_id": f"nanoslack_budget_{ask.scope}_{ask.room}",
            "elements": [
                button(ALLOW_ACTION_ID, "Allow 1× more", "primary"),
                button(STOP_ACTION_ID, "Stop for today", "danger"),
            ],
        },
    ]
