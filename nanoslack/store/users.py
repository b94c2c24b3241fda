"""Users (docs/data.md): one row per sender id, ``slack:U…`` or ``slack:bot:B…``."""

from __future__ import annotations

import time
from typing import Literal

from sqlalchemy import text

from nanoslack.store.database import Database
from nanoslack.store.fastpath import hot_first
from nanoslack.store.rows import Row
from nanoslack.store.tables import UserRow as UserRow

UserKind = Literal["human", "bot"]


_USER = Row(UserRow)
_GET = text(f"SELECT {_USER.sql} FROM users WHERE id = :id")
_BY_SLACK_USER = text(
    "SELECT display_name FROM users WHERE slack_user_id = :uid AND display_name IS NOT NULL"
    " ORDER BY updated_at DESC LIMIT 1"
)
_BOT_USERS = text("SELECT slack_user_id FROM users WHERE kind = 'bot' AND slack_user_id IS NOT NULL")
# A later sighting may learn a name (bots.info) but must never erase one: the edge
# resolves names, the router only makes sure the row exists.
_ENSURE = text(
    _USER.insert(values={"display_name": ":name", "created_at": ":now", "updated_at": ":now"})
    + " ON CONFLICT (id) DO UPDATE SET"
    " display_name = coalesce(excluded.display_name, users.display_name),"
    " slack_user_id = coalesce(excluded.slack_user_id, users.slack_user_id),"
    " updated_at = excluded.updated_at"
    # Spelled without SQLite's ``IS NOT`` between values, which PostgreSQL rejects.
    " WHERE (excluded.display_name IS NOT NULL"
    " AND (users.display_name IS NULL OR excluded.display_name <> users.display_name))"
    " OR (users.slack_user_id IS NULL AND excluded.slack_user_id IS NOT NULL)"
)


class Users:
    def __init__(self, db: Database) -> None:
        self._db = db

    def get(self, user_id: str) -> UserRow | None:
        with self._db.read() as conn:
            r = hot_first(conn, _GET, {"id": user_id})  # every turn's sender
        return _USER.first(r)

    def name_by_slack_user(self, slack_user_id: str) -> str | None:
        """The display name of whoever posts as this Slack user id (a bot's user id too)."""
        with self._db.transaction() as conn:
            value = conn.execute(_BY_SLACK_USER, {"uid": slack_user_id}).scalar()
        return None if value is None else str(value)

    def ensure(
        self,
        user_id: str,
        *,
        kind: UserKind,
        display_name: str | None = None,
        slack_user_id: str | None = None,
    ) -> UserRow:
        params = {
            "id": user_id,
            "kind": kind,
            "name": display_name or None,
            "slack_user_id": slack_user_id,
            "now": time.time(),
        }
        with self._db.transaction() as conn:
            conn.execute(_ENSURE, params)
            r = conn.execute(_GET, {"id": user_id}).one()
        return _USER.read(r)

    def bot_user_ids(self) -> frozenset[str]:
        """The Slack user ids of every bot seen so far (a modern bot posts as its bot user)."""
        with self._db.transaction() as conn:
            return frozenset(str(r[0]) for r in conn.execute(_BOT_USERS).all())
