"""Display names for senders, asked of Slack once and kept in the ``users`` table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from nanoslack.inbound import Inbound
from nanoslack.logs import get_logger
from nanoslack.store import Store

log = get_logger(__name__)


class SlackNames:
    """Implements ``pipeline.NameResolver`` with ``bots.info`` and ``users.info``."""

    def __init__(self, client: AsyncWebClient, store: Store) -> None:
        self._client = client
        self._store = store
        # Ids we already looked up this run (found or not): one Slack call per sender.
        self._asked: set[str] = set()

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

    async def _lookup(self, msg: Inbound) -> str | None:
        try:
            if msg.is_bot and msg.bot_id:
                resp = await self._client.bots_info(bot=msg.bot_id)
                bot: dict[str, Any] = resp.get("bot") or {}
                return _str(bot.get("name"))
            if msg.user:
                resp = await self._client.users_info(user=msg.user)
                user: dict[str, Any] = resp.get("user") or {}
                profile: dict[str, Any] = user.get("profile") or {}
                return (
                    _str(profile.get("display_name")) or _str(user.get("real_name")) or _str(user.get("name"))
                )
        except SlackApiError as exc:
            log.info("sender name lookup failed", sender=msg.sender, error=exc.response.get("error"))
        except Exception as exc:  # a name is a nicety: never fail a message over it
            log.info("sender name lookup failed", sender=msg.sender, error=type(exc).__name__)
        return None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
