"""Display names for senders, asked of Slack once and kept in the ``users`` table."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from nanoslack.inbound import Inbound
from nanoslack.logs import get_logger
from nanoslack.store import Store

log = get_logger(__name__)


# A room's member list is asked of Slack again after this long (people join and leave).
MEMBERS_TTL_S = 300.0


class SlackNames:
    """Implements ``pipeline.NameResolver`` (sender names, with ``bots.info`` and
    ``users.info``), ``turns.RoomDirectory`` (who is in a room, by name) and
    ``tools.team.Voters`` (who a vote in a room waits for)."""

    def __init__(
        self,
        client: AsyncWebClient,
        store: Store,
        siblings: Callable[[], Mapping[str, str]] = dict,
    ) -> None:
        self._client = client
        self._store = store
        # The fleet's instances (name → bot user id): named without asking Slack.
        self._siblings = siblings
        # Ids we already looked up this run (found or not): one Slack call per sender.
        self._asked: set[str] = set()
        self._members: dict[str, tuple[float, tuple[str, ...]]] = {}
        # Slack user id → a person in the workspace (not a bot, not deactivated).
        self._people: dict[str, bool] = {}

    async def ensure_many(self, msgs: Sequence[Inbound]) -> None:
        for msg in msgs:
            sender = msg.sender
            if sender and sender not in self._asked:  # the common case costs no await
                await self.ensure(msg)

    async def ensure(self, msg: Inbound) -> None:
        # Runs before the guard: a bot's message is named by the id it will be
        # admitted as (``Inbound.sender``).
        sender = msg.sender
        if not sender or sender in self._asked:
            return
        self._asked.add(sender)
        row = self._store.users.get(sender)
        if row is not None and row.display_name:
            return
        # Slack's own record first (bots.info, users.info): the name an event carries
        # (bot_profile, username) is what the poster chose and may be stale or absent.
        name = await self._lookup(msg) or (msg.bot_name if msg.is_bot else None)
        self._store.users.ensure(
            sender, kind="bot" if msg.is_bot else "human", display_name=name, slack_user_id=msg.user
        )

    def name_of_user(self, slack_user_id: str) -> str | None:
        for name, user_id in self._siblings().items():
            if user_id == slack_user_id:
                return name
        return self._store.users.name_by_slack_user(slack_user_id)

    async def member_names(self, channel: str) -> tuple[str, ...]:
        cached = self._members.get(channel)
        if cached is not None and time.monotonic() - cached[0] < MEMBERS_TTL_S:
            return cached[1]
        try:
            resp = await self._client.conversations_members(channel=channel, limit=200)
            ids = [str(m) for m in resp.get("members") or []]
        except Exception as exc:  # the prompt can do without the member list
            log.info("room members lookup failed", channel=channel, error=type(exc).__name__)
            return ()
        names = tuple([await self._user_name(uid) for uid in ids])
        self._members[channel] = (time.monotonic(), names)
        return names

    async def is_member(self, channel: str, slack_user_id: str) -> bool | None:
        """Whether ``slack_user_id`` (this instance's bot) is in ``channel``: False for a
        conversation Slack does not know; None when Slack could not say (try later)."""
        try:
            resp = await self._client.conversations_members(channel=channel, limit=1000)
        except SlackApiError as exc:
            error = str(exc.response.get("error") or "")
            return False if error in ("channel_not_found", "not_in_channel") else None
        except Exception:
            return None
        return slack_user_id in [str(m) for m in resp.get("members") or []]

    async def room_voters(self, channel: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The room's people (Slack user ids of members who are people in the workspace)
        and the fleet's bots this process runs there (instance names)."""
        try:
            resp = await self._client.conversations_members(channel=channel, limit=200)
            ids = [str(m) for m in resp.get("members") or []]
        except Exception as exc:  # the vote then waits for the bots alone, and closes on time
            log.info("room members lookup failed", channel=channel, error=type(exc).__name__)
            return (), ()
        bots_by_user = {user_id: name for name, user_id in self._siblings().items()}
        humans = []
        for uid in ids:
            if uid not in bots_by_user and await self._is_person(uid):
                humans.append(uid)
        return tuple(humans), tuple(bots_by_user[uid] for uid in ids if uid in bots_by_user)

    async def _is_person(self, slack_user_id: str) -> bool:
        if slack_user_id not in self._people:
            try:
                resp = await self._client.users_info(user=slack_user_id)
                user: dict[str, Any] = resp.get("user") or {}
                self._people[slack_user_id] = not user.get("is_bot") and not user.get("deleted")
            except Exception as exc:  # not known to the workspace: not a voter
                log.info("room member lookup failed", user=slack_user_id, error=type(exc).__name__)
                return False
        return self._people[slack_user_id]

    async def _user_name(self, slack_user_id: str) -> str:
        known = self.name_of_user(slack_user_id)
        if known:
            return known
        try:
            resp = await self._client.users_info(user=slack_user_id)
        except Exception:
            return slack_user_id
        return _display_name(resp.get("user") or {}) or slack_user_id

    async def _lookup(self, msg: Inbound) -> str | None:
        try:
            if msg.is_bot and msg.bot_id:
                resp = await self._client.bots_info(bot=msg.bot_id)
                bot: dict[str, Any] = resp.get("bot") or {}
                return _str(bot.get("name"))
            if msg.user:
                resp = await self._client.users_info(user=msg.user)
                return _display_name(resp.get("user") or {})
        except SlackApiError as exc:
            log.info("sender name lookup failed", sender=msg.sender, error=exc.response.get("error"))
        except Exception as exc:  # a name is a nicety: never fail a message over it
            log.info("sender name lookup failed", sender=msg.sender, error=type(exc).__name__)
        return None


def _display_name(user: dict[str, Any]) -> str | None:
    profile: dict[str, Any] = user.get("profile") or {}
    return _str(profile.get("display_name")) or _str(user.get("real_name")) or _str(user.get("name"))


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
