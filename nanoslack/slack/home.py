"""The Home tab of one instance's app (docs/agent-surface.md, "The owner's Home"):
rendered from the core's ``home.HomeSource`` as Block Kit and published with
``views.publish`` (no scope; ``user_id``, ``view`` of type ``home``).

A person opening the Home tab (``app_home_opened`` with ``tab: home``) gets it published;
an owner's (a visitor's only when they open it) is read again every ``poll`` seconds
while the fleet runs and published again when what it shows changed, at most once per
``interval`` seconds per person (``Coalescer``): a change inside the window is published
when the window ends, with whatever the Home shows then, so the last change is always
published. The view is only published when its blocks differ from the last ones Slack
accepted for that person.

A Slack that refuses the Home (``not_enabled``: the app's Home tab is off) turns it off for
the instance with one log line (``home refused``); another error is a debug line and the
next round tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from nanoslack import mrkdwn
from nanoslack.asks import ROUTINE
from nanoslack.budgets import usd
from nanoslack.home import HomeSource, OwnerHome, VisitorHome
from nanoslack.logs import get_logger
from nanoslack.slack.blocks import Block, action_id, ask_blocks
from nanoslack.slack.status import slack_error

log = get_logger(__name__)

# Slack's errors that mean the Home is off for this app (not worth trying again).
REFUSED = frozenset({"not_enabled", "missing_scope", "not_allowed_token_type", "unknown_method"})
# At most this many of each list (a view holds at most 100 blocks).
MAX_LISTED = 15
# A routine's ``channel`` that means each owner's DM with the bot (docs/routines.md).
OWNERS_CHANNEL = "owner"
# How often an owner's Home is read again to see whether it changed (capped by the interval).
POLL_S = 2.0


class Coalescer:
    """At most one publish per ``interval`` seconds per person; the clock is the caller's."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._last: dict[str, float] = {}

    def wait(self, user: str, now: float) -> float:
        """Seconds before ``user``'s Home may be published again (0: now)."""
        last = self._last.get(user)
        return 0.0 if last is None else max(0.0, last + self.interval - now)

    def published(self, user: str, now: float) -> None:
        self._last[user] = now


class HomePublisher:
    def __init__(
        self,
        source: HomeSource,
        client: AsyncWebClient,
        *,
        bot_user_id: str,
        interval: float,
        clock: Callable[[], float] = time.monotonic,
        poll: float = POLL_S,
    ) -> None:
        self._source = source
        self._client = client
        self._bot_user_id = bot_user_id
        self._coalescer = Coalescer(interval)
        self._clock = clock
        self._poll = min(poll, interval)
        self.instance = source.instance
        # Who opened the Home, and the blocks Slack last accepted for each.
        self._shown: dict[str, list[Block] | None] = {}
        # Who opened it since the last round: a visitor's Home is read only then.
        self._opened: set[str] = set()
        self._refused = False
        self._kick = asyncio.Event()

    def opened(self, event: Mapping[str, Any]) -> None:
        """``app_home_opened`` with ``tab: home``: that person's Home goes out at the next round."""
        user = event.get("user")
        if isinstance(user, str) and user:
            self._shown.setdefault(user, None)
            self._opened.add(user)
            self._kick.set()

    async def run(self) -> None:
        while not self._refused:
            wait = await self.tick(self._clock())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), timeout=min(wait, self._poll))
            self._kick.clear()

    async def tick(self, now: float) -> float:
        """Publish each Home that changed and may go out at ``now``; the seconds until the
        next one that changed may."""
        soonest = self._poll
        opened, self._opened = self._opened, set()
        for user in list(self._shown):
            if self._refused:
                break
            if user not in opened and not self._source.is_owner(user):
                continue  # what a visitor sees changes only with SOUL.md: read when they open it
            blocks = self.blocks(user)
            if blocks == self._shown[user]:
                continue
            wait = self._coalescer.wait(user, now)
            if wait > 0:
                soonest = min(soonest, wait)
                self._opened.add(user)  # still to publish: read again next round
                continue
            if await self._publish(user, blocks):
                self._shown[user] = blocks
                self._coalescer.published(user, now)
            else:
                self._opened.add(user)
        return soonest

    def blocks(self, user: str) -> list[Block]:
        home = self._source.for_user(user)
        if isinstance(home, OwnerHome):
            return owner_blocks(home)
        return visitor_blocks(home, self._bot_user_id)

    async def _publish(self, user: str, blocks: list[Block]) -> bool:
        try:
            await self._client.views_publish(user_id=user, view={"type": "home", "blocks": blocks})
        except Exception as exc:
            error = slack_error(exc) or type(exc).__name__
            if error in REFUSED:
                self._refused = True
                log.warning("home refused", instance=self.instance, reason=error)
            else:
                log.debug("home publish failed", instance=self.instance, user=user, error=error)
            return False
        log.debug("home published", instance=self.instance, user=user, owner=self._source.is_owner(user))
        return True


# -- Block Kit --------------------------------------------------------------------------------


def visitor_blocks(home: VisitorHome, bot_user_id: str) -> list[Block]:
    how = (
        f"To talk to {home.instance}, open the *Messages* tab and write to it, or mention"
        f" {mrkdwn.user(bot_user_id)} in a channel it is in."
    )
    return [_header(home.instance), _section(home.description), _section(how)]


def owner_blocks(home: OwnerHome) -> list[Block]:
    blocks: list[Block] = [_header(f"{home.instance} · your Home")]
    blocks += _titled("Rooms", [_room(r.channel, r.name, r.halted) for r in home.rooms], "No rooms yet.")
    blocks += _titled("Waiting for you", [ask_blocks(a) for a in home.asks], "Nothing waits for an owner.")
    blocks += [{"type": "divider"}, _section("*Today's spend* (UTC day)"), _spend(home)]
    blocks += _titled(
        "Routines",
        [_routine(r.name, r.schedule, r.channel, r.paused, r.last_status) for r in home.routines],
        "No routines.",
    )
    notes = " · ".join(f"{scope}: {n}" for scope, n in home.notes) or "none kept"
    blocks += [{"type": "divider"}, _section("*Notes*"), _context(notes)]
    return blocks


def _titled(title: str, items: list[list[Block]], empty: str) -> list[Block]:
    blocks: list[Block] = [{"type": "divider"}, _section(f"*{title}*")]
    if not items:
        return [*blocks, _context(empty)]
    for item in items[:MAX_LISTED]:
        blocks += item
    if len(items) > MAX_LISTED:
        blocks.append(_context(f"… and {len(items) - MAX_LISTED} more (the CLI lists them all)."))
    return blocks


def _room(channel: str, name: str | None, halted: bool) -> list[Block]:
    shown = f"#{name}" if name else mrkdwn.room(channel)
    if not halted:
        return [_section(f"{shown} · running")]
    section = _section(f"{shown} · *halted*")
    section["accessory"] = _button("resume", "Resume", channel, "primary")
    return [section]


def _spend(home: OwnerHome) -> Block:
    spend = home.spend
    tokens = f"{spend.tokens:,} of {spend.token_cap:,}" if spend.token_cap else f"{spend.tokens:,} (no cap)"
    dollars = f"{usd(spend.usd)} of {usd(spend.usd_cap)}" if spend.usd_cap else f"{usd(spend.usd)} (no cap)"
    return {"type": "section", "fields": [_mrkdwn(f"*Tokens*\n{tokens}"), _mrkdwn(f"*Dollars*\n{dollars}")]}


def _routine(name: str, schedule: str, channel: str, paused: bool, last: str | None) -> list[Block]:
    state = "*paused*" if paused else "scheduled"
    where = "the owners' DMs" if channel == OWNERS_CHANNEL else mrkdwn.room(channel)
    text = f"*{name}* · {schedule} → {where} · {state}" + (f" · last: {last}" if last else "")
    run, pause, resume = ROUTINE.choices
    toggle = resume if paused else pause
    buttons = [_button(c.id, c.label, name, c.style) for c in (run, toggle)]
    return [_section(text), {"type": "actions", "block_id": f"nanoslack_routine_{name}", "elements": buttons}]


def _button(choice: str, label: str, value: str, style: str | None = None) -> Block:
    button: Block = {
        "type": "button",
        "action_id": action_id(choice),
        "text": {"type": "plain_text", "text": label},
        "value": value,
    }
    if style:
        button["style"] = style
    return button


def _header(text: str) -> Block:
    return {"type": "header", "text": {"type": "plain_text", "text": text[:150]}}


def _section(text: str) -> Block:
    return {"type": "section", "text": _mrkdwn(text)}


def _context(text: str) -> Block:
    return {"type": "context", "elements": [_mrkdwn(text)]}


def _mrkdwn(text: str) -> Block:
    return {"type": "mrkdwn", "text": text}
