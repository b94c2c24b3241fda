"""Instance leases (docs/operations.md): which process runs an instance.

One row per instance. A process takes the row when it is free, lapsed, or already
its own, renews it by heartbeat, and deletes it on a clean stop. Times come from
the database's clock on PostgreSQL, so hosts with skewed clocks still agree on
when a lease lapsed; SQLite is one host, whose clock it is.
"""

from __future__ import annotations

import time

from sqlalchemy import Connection, text

from nanoslack.store.database import Database
from nanoslack.store.fastpath import hot_first
from nanoslack.store.rows import Row
from nanoslack.store.tables import LeaseRow as LeaseRow

_LEASE = Row(LeaseRow)
_PG_NOW = text("SELECT extract(epoch from clock_timestamp())")
# Taken when free, lapsed, or ours; otherwise the row is left as it is.
_TAKE = text(
    _LEASE.insert(values={"expires_at": ":expires", "heartbeat_at": ":now"})
    + " ON CONFLICT (instance) DO UPDATE SET holder = excluded.holder,"
    " expires_at = excluded.expires_at, heartbeat_at = excluded.heartbeat_at"
    " WHERE instance_leases.holder = excluded.holder OR instance_leases.expires_at <= :now"
    " OR instance_leases.holder = :stale"
)
_GET = text(f"SELECT {_LEASE.sql} FROM instance_leases WHERE instance = :instance")
_RENEW = text(_LEASE.update({"expires_at": ":expires", "heartbeat_at": ":now"}, where=("instance", "holder")))
# Inside a batch's transaction: is this process still the holder? FOR SHARE makes a
# takeover (an UPDATE of the row) wait until the batch has committed.
_HOLDER = text("SELECT holder FROM instance_leases WHERE instance = :instance")
_HOLDER_PG = text("SELECT holder FROM instance_leases WHERE instance = :instance FOR SHARE")
_RELEASE = text("DELETE FROM instance_leases WHERE instance = :instance AND holder = :holder")


class Leases:
    def __init__(self, db: Database) -> None:
        self._db = db

    def _now(self, conn: Connection) -> float:
        if self._db.is_sqlite:
            return time.time()
        return float(conn.execute(_PG_NOW).scalar_one())

    def take(self, instance: str, holder: str, ttl: float, *, stale: str | None = None) -> LeaseRow:
        """Try to hold ``instance`` for ``ttl`` seconds; the row as it now stands
        (``row.holder == holder`` when taken). ``stale`` names a holder known to be
        dead (a crashed process on this host), whose lease need not lapse first."""
        with self._db.transaction() as conn:
            now = self._now(conn)
            params = {
                "instance": instance,
                "holder": holder,
                "expires": now + ttl,
                "now": now,
                "stale": stale,
            }
            conn.execute(_TAKE, params)
            r = conn.execute(_GET, {"instance": instance}).one()
        return _LEASE.read(r)

    def get(self, instance: str) -> LeaseRow | None:
        with self._db.transaction() as conn:
            r = conn.execute(_GET, {"instance": instance}).first()
        return _LEASE.first(r)

    def renew(self, instance: str, holder: str, ttl: float) -> bool:
        """Extend our lease; False when it is no longer ours (it lapsed and was taken)."""
        with self._db.transaction() as conn:
            now = self._now(conn)
            params = {"instance": instance, "holder": holder, "expires": now + ttl, "now": now}
            return conn.execute(_RENEW, params).rowcount == 1

    def release(self, instance: str, holder: str) -> bool:
        with self._db.transaction() as conn:
            return conn.execute(_RELEASE, {"instance": instance, "holder": holder}).rowcount == 1

    def holds(self, instance: str, holder: str) -> bool:
        """Whether ``holder`` still holds ``instance``: the fence every batch passes, so
        a process that lost its lease (frozen, then thawed) never finishes work the
        new holder has taken over."""
        with self._db.transaction() as conn:
            # Every batch asks (the fence): the driver's fast path.
            row = hot_first(conn, _HOLDER if self._db.is_sqlite else _HOLDER_PG, {"instance": instance})
        return row is not None and str(row[0]) == holder
