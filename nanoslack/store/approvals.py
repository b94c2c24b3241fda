"""Sender approvals (docs/architecture.md): one row per (agent group, sender), ever.

The unique row is what makes "one request no matter how many messages" hold, and
what remembers a Deny: a decided row is never reopened by new messages.
"""

from __future__ import annotations

import time

from sqlalchemy import text

from nanoslack.store.database import Database
from nanoslack.store.fastpath import hot_first
from nanoslack.store.rows import Row, insert_sql
from nanoslack.store.tables import ApprovalRow as ApprovalRow

_APPROVAL = Row(
    ApprovalRow,
    prefix="a.",
    columns={"instance": "g.instance", "platform_id": "m.platform_id"},
)
_SELECT = (
    f"SELECT {_APPROVAL.sql}"
    " FROM pending_sender_approvals a"
    " JOIN agent_groups g ON g.id = a.agent_group_id"
    " LEFT JOIN messaging_groups m ON m.id = a.messaging_group_id"
)
_GET = text(f"{_SELECT} WHERE a.id = :id")
_BY_SENDER = text(f"{_SELECT} WHERE a.agent_group_id = :agent_group_id AND a.sender_id = :sender_id")
_FIND = text(f"{_SELECT} WHERE g.instance = :instance AND a.sender_id = :sender_id")
_PENDING = text(f"{_SELECT} WHERE a.status = 'pending' ORDER BY a.created_at, a.id")
_ALL = text(f"{_SELECT} ORDER BY a.created_at, a.id")
_OPEN = text(
    insert_sql(
        "pending_sender_approvals",
        ("agent_group_id", "messaging_group_id", "sender_id", "status", "created_at"),
        values={"status": "'pending'", "created_at": ":now"},
    )
    + " ON CONFLICT DO NOTHING"
)
_DECISION = {"status": ":status", "decided_at": ":now", "decided_by": ":by"}
_DECIDE = text(_APPROVAL.update(_DECISION, also="status = 'pending'"))
_OVERRIDE = text(_APPROVAL.update(_DECISION, also="status != :status"))
# The unique (agent_group_id, sender_id) index answers it: a repeated request's one statement.
_STATE = text(
    "SELECT id, status FROM pending_sender_approvals"
    " WHERE agent_group_id = :agent_group_id AND sender_id = :sender_id"
)
_SET_OWNER = text(_APPROVAL.update({"owner_id": ":owner"}))


class Approvals:
    def __init__(self, db: Database) -> None:
        self._db = db

    def open_or_get(
        self, agent_group_id: int, messaging_group_id: int, sender_id: str
    ) -> tuple[ApprovalRow, bool]:
        key = {"agent_group_id": agent_group_id, "sender_id": sender_id}
        with self._db.transaction() as conn:
            created = (
                conn.execute(
                    _OPEN, {**key, "messaging_group_id": messaging_group_id, "now": time.time()}
                ).rowcount
                == 1
            )
            r = conn.execute(_BY_SENDER, key).one()
        return _APPROVAL.read(r), created

    def state(self, agent_group_id: int, sender_id: str) -> tuple[int, str] | None:
        """The request row's id and status, None when there is none yet: what the gate
        needs for every message of a sender whose request already exists."""
        with self._db.transaction() as conn:
            r = hot_first(conn, _STATE, {"agent_group_id": agent_group_id, "sender_id": sender_id})
        return (int(r[0]), str(r[1])) if r is not None else None

    def get(self, approval_id: int) -> ApprovalRow | None:
        with self._db.transaction() as conn:
            r = conn.execute(_GET, {"id": approval_id}).first()
        return _APPROVAL.first(r)

    def find(self, instance: str, sender_id: str) -> ApprovalRow | None:
        with self._db.transaction() as conn:
            r = conn.execute(_FIND, {"instance": instance, "sender_id": sender_id}).first()
        return _APPROVAL.first(r)

    def decide(self, approval_id: int, *, allow: bool, by: str, override: bool = False) -> ApprovalRow | None:
        """Record the answer; None when it was already decided (a double click).

        ``override`` lets an operator reverse an earlier answer (CLI only).
        """
        params = {
            "id": approval_id,
            "status": "approved" if allow else "denied",
            "by": by,
            "now": time.time(),
        }
        with self._db.transaction() as conn:
            if conn.execute(_OVERRIDE if override else _DECIDE, params).rowcount != 1:
                return None
            r = conn.execute(_GET, {"id": approval_id}).one()
        return _APPROVAL.read(r)

    def set_owner(self, approval_id: int, owner_id: str) -> None:
        with self._db.transaction() as conn:
            conn.execute(_SET_OWNER, {"id": approval_id, "owner": owner_id})

    def pending(self) -> list[ApprovalRow]:
        with self._db.transaction() as conn:
            return _APPROVAL.all(conn.execute(_PENDING).all())

    def list(self) -> list[ApprovalRow]:
        with self._db.transaction() as conn:
            return _APPROVAL.all(conn.execute(_ALL).all())
