"""Owners' answers when a daily token budget ran out (docs/operations.md).

``scope`` is ``room`` (``NANOSLACK_ROOM_TOKENS``, subject = conversation id) or
``instance`` (``NANOSLACK_DAILY_TOKENS``, subject = instance name).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import text

from nanoslack.store.database import Database
from nanoslack.store.rows import Row, insert_sql


@dataclass(frozen=True, slots=True)
class Grant:
    allowed: int  # the day's raised cap (0: none)
    stopped_by: str | None


_GRANT_ROW = Row(Grant, table="budget_grants")
_GRANT = text(
    f"SELECT {_GRANT_ROW.sql} FROM budget_grants WHERE scope = :scope AND subject = :subject AND day = :day"
)
_COLUMNS = ("scope", "subject", "day", "allowed", "stopped_by", "updated_at")
_ALLOW = text(
    insert_sql("budget_grants", _COLUMNS, values={"stopped_by": "NULL", "updated_at": ":now"})
    + " ON CONFLICT (scope, subject, day) DO UPDATE SET stopped_by = NULL,"
    " allowed = CASE WHEN budget_grants.allowed > :allowed THEN budget_grants.allowed ELSE :allowed END,"
    " updated_at = :now"
)
_STOP = text(
    insert_sql("budget_grants", _COLUMNS, values={"allowed": "0", "stopped_by": ":by", "updated_at": ":now"})
    + " ON CONFLICT (scope, subject, day) DO UPDATE SET stopped_by = :by, updated_at = :now"
)


class Grants:
    def __init__(self, db: Database) -> None:
        self._db = db

    def get(self, scope: str, subject: str, day: str) -> Grant:
        with self._db.transaction() as conn:
            row = conn.execute(_GRANT, {"scope": scope, "subject": subject, "day": day}).first()
        return _GRANT_ROW.read(row) if row else Grant(0, None)

    def allow(self, scope: str, subject: str, day: str, *, up_to: int) -> None:
        params = {"scope": scope, "subject": subject, "day": day, "allowed": up_to, "now": time.time()}
        with self._db.transaction() as conn:
            conn.execute(_ALLOW, params)

    def stop(self, scope: str, subject: str, day: str, *, by: str) -> None:
        params = {"scope": scope, "subject": subject, "day": day, "by": by, "now": time.time()}
        with self._db.transaction() as conn:
            conn.execute(_STOP, params)
