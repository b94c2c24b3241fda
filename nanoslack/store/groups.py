"""Messaging groups (docs/architecture.md, docs/data.md) and the threads an instance is engaged in.

``generation`` counts this process's writes (and rollbacks) to these tables, so a
cache can tell its own changes apart from other processes' (``PRAGMA data_version``
only moves when *another* connection commits).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Collection
from typing import Literal

from sqlalchemy import text

from nanoslack.inbound import is_dm_channel
from nanoslack.store.database import Cached, Database
from nanoslack.store.fastpath import hot_execute_in_order, hot_exists, hot_rows, in_order, positional_names
from nanoslack.store.rows import Row
from nanoslack.store.tables import EngagedThread
from nanoslack.store.tables import GroupRow as GroupRow
from nanoslack.store.writebehind import WriteBehind

GroupKind = Literal["dm", "group"]
PLATFORM = "slack"

# Defaults by kind (docs/architecture.md). DMs answer everything (pattern "."), groups wait for a
# mention and then stay in that thread.
GROUP_DEFAULTS = {"engage_mode": "mention-sticky", "engage_pattern": None, "policy": "request_approval"}
DM_DEFAULTS = {"engage_mode": "pattern", "engage_pattern": ".", "policy": "decline_notify"}


_GROUP = Row(GroupRow)
_GET = text(
    f"SELECT {_GROUP.sql} FROM messaging_groups"
    " WHERE platform = :platform AND platform_id = :platform_id AND instance = :instance"
)
_LIST = text(f"SELECT {_GROUP.sql} FROM messaging_groups ORDER BY platform_id, instance")
_CREATE = text(
    _GROUP.insert(skip=("id",), values={"unknown_sender_policy": ":policy", "created_at": ":now"})
    + " ON CONFLICT DO NOTHING"
)
_MAKE_PUBLIC = text(
    _GROUP.update({"unknown_sender_policy": "'public'"}, where=("platform", "platform_id", "instance"))
)
_ENGAGE = in_order(
    text(
        Row(EngagedThread).insert(values={"messaging_group_id": ":group_id", "engaged_at": ":now"})
        + " ON CONFLICT DO NOTHING"
    ),
    ("group_id", "thread_key", "now"),
)
_IS_ENGAGED = text(
    "SELECT 1 FROM engaged_threads WHERE messaging_group_id = :group_id AND thread_key = :thread_key"
)


# ``engaged_among`` asks for this many thread keys per statement (padded, so the
# statement has one shape the driver keeps prepared).
_AMONG_CHUNK = 64
_AMONG = text(
    "SELECT thread_key FROM engaged_threads WHERE messaging_group_id = :p0 AND thread_key IN ("
    + ", ".join(positional_names(_AMONG_CHUNK + 1)[1:])
    + ")"
)


class MessagingGroups(Cached):
    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self._engaged = WriteBehind(db, _ENGAGE)

    def batched(self) -> contextlib.AbstractContextManager[None]:
        """Inside one transaction (a pipeline batch): ``engage_thread`` keeps its rows, written in one
        call at the end or before anything reads them (``store/writebehind.py``)."""
        return self._engaged.batched()

    def flush(self) -> None:
        self._engaged.flush()

    def get(self, platform_id: str, instance: str) -> GroupRow | None:
        params = {"platform": PLATFORM, "platform_id": platform_id, "instance": instance}
        with self._db.transaction() as conn:
            r = conn.execute(_GET, params).first()
        return _GROUP.first(r)

    def create(
        self, platform_id: str, instance: str, *, kind: GroupKind, name: str | None = None
    ) -> GroupRow:
        """Insert with the defaults of ``kind``; an existing row is returned unchanged."""
        defaults = DM_DEFAULTS if kind == "dm" else GROUP_DEFAULTS
        key = {"platform": PLATFORM, "platform_id": platform_id, "instance": instance}
        with self._db.transaction() as conn:
            conn.execute(_CREATE, {**key, **defaults, "kind": kind, "name": name, "now": time.time()})
            r = conn.execute(_GET, key).one()
            self._bump()
        return _GROUP.read(r)

    def ensure_public_room(self, platform_id: str, instance: str) -> GroupRow:
        """``open-room --public``: the room admits every sender, with no further step."""
        key = {"platform": PLATFORM, "platform_id": platform_id, "instance": instance}
        with self._db.transaction() as conn:
            conn.execute(
                _CREATE,
                {
                    **key,
                    **GROUP_DEFAULTS,
                    "policy": "public",
                    "kind": "group",
                    "name": None,
                    "now": time.time(),
                },
            )
            conn.execute(_MAKE_PUBLIC, key)
            r = conn.execute(_GET, key).one()
            self._bump()
        return _GROUP.read(r)

    def list(self) -> list[GroupRow]:
        with self._db.transaction() as conn:
            return _GROUP.all(conn.execute(_LIST).all())

    def engage_thread(self, group_id: int, thread_key: str) -> None:
        params = (group_id, thread_key, time.time())
        if self._engaged.keep(params):  # a pipeline batch: no transaction to enter per row
            return
        with self._db.transaction() as conn:
            hot_execute_in_order(conn, _ENGAGE, params)

    def engage_own_post(self, channel: str, instance: str, ts: str) -> None:
        """The instance started a thread with a top-level post (``ts``): it is engaged there.
        A DM has no threads (nothing to do); a room the instance was never mentioned in
        gets its messaging group, with a group's defaults."""
        if is_dm_channel(channel):
            return
        platform_id = f"slack:{channel}"
        group = self.get(platform_id, instance) or self.create(platform_id, instance, kind="group")
        if not group.is_dm:
            self.engage_thread(group.id, ts)

    def engaged_among(self, group_id: int, thread_keys: Collection[str]) -> set[str]:
        """Which of ``thread_keys`` the group is engaged in: ``is_engaged`` for a batch."""
        keys = list(thread_keys)
        found: set[str] = set()
        self.flush()
        with self._db.transaction() as conn:
            for start in range(0, len(keys), _AMONG_CHUNK):
                chunk = keys[start : start + _AMONG_CHUNK]
                chunk += [chunk[-1]] * (_AMONG_CHUNK - len(chunk))
                found.update(str(r[0]) for r in hot_rows(conn, _AMONG, [group_id, *chunk]))
        return found

    def is_engaged(self, group_id: int, thread_key: str) -> bool:
        self.flush()
        with self._db.transaction() as conn:
            return hot_exists(conn, _IS_ENGAGED, {"group_id": group_id, "thread_key": thread_key})
