"""Display names for senders, asked of Slack once and kept in the ``users`` table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from nanoslack.inbound import Inbound, bot_sender_id
from nanoslack.store import Store

log = structlog.get_logger("nanoslack.names")


class SlackNames:
    """Implements ``pipeline.NameResolver`` with ``bots.info`` and ``users.info``."""

    def __init__(self, client: AsyncWebClient, store: Store) -> None:
        self._client = client
        self._store = store
        # Ids we already looked up this run (found or not): one Slack call per sender.
        self._asked: set[str] = set()

    async def ensure_many(self, msgs: Sequence[Inbound]) -> None:
        for msg in msgs:
            sender = _sender(msg)
            if sender and sender not in self._asked:  # the common case costs no await
                await self.ensure(msg)

    async def ensure(self, msg: Inbound) -> None:
        sender = _sender(msg)
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
            log.info("sender name lookup failed", sender=msg.sender_id, error=exc.response.get("error"))
        except Exception as exc:  # a name is a nicety: never fail a message over it
            log.info("sender name lookup failed", sender=msg.sender_id, error=type(exc).__name__)
        return None


def _sender(msg: Inbound) -> str:
    # Runs before the guard (outside any transaction), so a bot's message has no
    # sender yet: its id will be slack:bot:<bot_id> if admitted (§3.6).
    return msg.sender_id or (bot_sender_id(msg.bot_id) if msg.bot_id else "")


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
