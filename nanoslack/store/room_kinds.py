"""How each A2A room works (docs/team-rooms.md): ``a2a_rooms``, one row per room."""

from __future__ import annotations

import time

from sqlalchemy import text

from nanoslack.store.database import Database
from nanoslack.store.fastpath import hot_first
from nanoslack.store.rows import Row
from nanoslack.store.tables import RoomRow as RoomRow

KINDS = ("mention", "round", "chain")


def mention_room(channel: str) -> RoomRow:
    return RoomRow(f"slack:{channel}", "mention", None, None, (), (), 0.0)


def _list(value: object) -> tuple[str, ...]:
    return tuple(m.strip() for m in str(value or "").split(",") if m.strip())


def _kind(value: object) -> str:
    kind = str(value).strip().lower() if value else "mention"
    return kind if kind in KINDS else "mention"


def _or_none(value: object) -> str | None:
    return str(value) if value else None


_ROOM = Row(
    RoomRow,
    convert={"kind": _kind, "lead": _or_none, "mission": _or_none, "members": _list, "member_users": _list},
)
_GET = text(f"SELECT {_ROOM.sql} FROM a2a_rooms WHERE platform_id = :platform_id")
_ALL = text(f"SELECT {_ROOM.sql} FROM a2a_rooms ORDER BY platform_id")
_SET = text(
    _ROOM.insert(values={"updated_at": ":now"})
    + " ON CONFLICT (platform_id) DO UPDATE SET kind = excluded.kind, lead = excluded.lead,"
    " mission = excluded.mission, members = coalesce(excluded.members, a2a_rooms.members),"
    " member_users = coalesce(excluded.member_users, a2a_rooms.member_users),"
    " updated_at = excluded.updated_at"
)


class RoomKinds:
    def __init__(self, db: Database) -> None:
        self._db = db

    def set(
        self,
        channel: str,
        *,
        kind: str = "mention",
        lead: str | None = None,
        mission: str | None = None,
        members: tuple[str, ...] | None = None,
        member_users: tuple[str, ...] | None = None,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"room kind must be one of {', '.join(KINDS)}, got {kind!r}")
        params = {
            "platform_id": f"slack:{channel}",
            "kind": kind,
            "lead": lead,
            "mission": mission,
            "members": ",".join(members) if members is not None else None,
            "member_users": ",".join(member_users) if member_users is not None else None,
            "now": time.time(),
        }
        with self._db.transaction() as conn:
            conn.execute(_SET, params)

    def get(self, channel: str) -> RoomRow:
        """The room's row, or a plain mention room when it has none."""
        with self._db.read() as conn:
            r = hot_first(conn, _GET, {"platform_id": f"slack:{channel}"})
        return _ROOM.read(r) if r else mention_room(channel)

    def list(self) -> list[RoomRow]:
        with self._db.transaction() as conn:
            return _ROOM.all(conn.execute(_ALL).all())
