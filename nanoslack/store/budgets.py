"""Owners' answers when a daily token budget ran out (docs/operations.md).

``scope`` is ``room`` (``NANOSLACK_ROOM_TOKENS``, subject = conversation id) or
``instance`` (``NANOSLACK_DAILY_TOKENS``, subject = instance name).
"""

from __future__ import annotations

import time

from sqlalchemy import text

from nanoslack.store.database import Database
from nanoslack.store.rows import Row
from nanoslack.store.tables import Grant as Grant

_GRANT_ROW = Row(Grant)
_GRANT = text(
    f"SELECT {_GRANT_ROW.sql} FROM budget_grants WHERE scope = :scope AND subject = :subject AND day = :day"
)
_ALLOW = text(
    _GRANT_ROW.insert(values={"stopped_by": "NULL", "updated_at": ":now"})
    + " ON CONFLICT (scope, subject, day) DO UPDATE SET stopped_by = NULL,"
    " allowed = CASE WHEN budget_grants.allowed > :allowed THEN budget_grants.allowed ELSE :allowed END,"
    " updated_at = :now"
)
_STOP = text(
    _GRANT_ROW.insert(values={"allowed": "0", "stopped_by": ":by", "updated_at": ":now"})
    + " ON CONFLICT (scope, subject, day) DO UPDATE SET stopped_by = :by, updated_at = :now"
)


class Grants:
    def __init__(self, db: Database) -> None:
        self._db = db

    def get(self, scope: str, subject: str, day: str) -> Grant:
        with self._db.transaction() as conn:
            row = conn.execute(_GRANT, {"scope": scope, "subject": subject, "day": day}).first()
        return _GRANT_ROW.read(row) if row else Grant(scope, subject, day, 0, None, 0.0)

    def allow(self, scope: str, subject: str, day: str, *, up_to: int) -> None:
        params = {"scope": scope, "subject": subject, "day": day, "allowed": up_to, "now": time.time()}
        with self._db.transaction() as conn:
            conn.execute(_ALLOW, params)

    def stop(self, scope: str, subject: str, day: str, *, by: str) -> None:
        params = {"scope": scope, "subject": subject, "day": day, "by": by, "now": time.time()}
        with self._db.transaction() as conn:
            conn.execute(_STOP, params)
