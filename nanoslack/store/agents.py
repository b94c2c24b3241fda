"""Agent groups (one per instance) and their members (docs/architecture.md, docs/data.md).

Members and admins pass the sender gate. ``generation`` moves on this process's
membership writes and on rollbacks, for the gate's membership cache.
"""

from __future__ import annotations

import time
from typing import Literal

from sqlalchemy import text

from nanoslack.store.database import Cached
from nanoslack.store.rows import Row
from nanoslack.store.tables import AgentGroupMember
from nanoslack.store.tables import AgentGroupRow as AgentGroupRow

Role = Literal["member", "admin"]


_AGENT_GROUP = Row(AgentGroupRow)
_GET = text(f"SELECT {_AGENT_GROUP.sql} FROM agent_groups WHERE instance = :instance")
_CREATE = text(
    _AGENT_GROUP.insert(skip=("id",), values={"name": ":instance", "created_at": ":now"})
    + " ON CONFLICT DO NOTHING"
)
_ADD = text(
    Row(AgentGroupMember).insert(values={"agent_group_id": ":group_id", "added_at": ":now"})
    + " ON CONFLICT DO NOTHING"
)
_REMOVE = text("DELETE FROM agent_group_members WHERE agent_group_id = :group_id AND user_id = :user_id")
_IS_MEMBER = text(
    "SELECT 1 FROM agent_group_members WHERE agent_group_id = :group_id AND user_id = :user_id"
    " AND role IN ('member', 'admin')"
)
_MEMBERS = text(
    "SELECT user_id FROM agent_group_members WHERE agent_group_id = :group_id AND role IN ('member', 'admin')"
)


class AgentGroups(Cached):
    def ensure(self, instance: str) -> AgentGroupRow:
        with self._db.transaction() as conn:
            r = conn.execute(_GET, {"instance": instance}).first()
            if r is None:
                conn.execute(_CREATE, {"instance": instance, "now": time.time()})
                r = conn.execute(_GET, {"instance": instance}).one()
                self._bump()
        return _AGENT_GROUP.read(r)

    def add_member(
        self, agent_group_id: int, user_id: str, role: Role = "member", added_by: str | None = None
    ) -> bool:
        """False when already a member (an admin is never demoted by a re-add)."""
        params = {
            "group_id": agent_group_id,
            "user_id": user_id,
            "role": role,
            "now": time.time(),
            "added_by": added_by,
        }
        with self._db.transaction() as conn:
            added = conn.execute(_ADD, params).rowcount == 1
            self._bump()
        return added

    def remove_member(self, agent_group_id: int, user_id: str) -> bool:
        with self._db.transaction() as conn:
            removed = conn.execute(_REMOVE, {"group_id": agent_group_id, "user_id": user_id}).rowcount == 1
            self._bump()
        return removed

    def is_member(self, agent_group_id: int, user_id: str) -> bool:
        with self._db.transaction() as conn:
            return (
                conn.execute(_IS_MEMBER, {"group_id": agent_group_id, "user_id": user_id}).first() is not None
            )

    def members(self, agent_group_id: int) -> frozenset[str]:
        with self._db.transaction() as conn:
            return frozenset(str(r[0]) for r in conn.execute(_MEMBERS, {"group_id": agent_group_id}).all())
