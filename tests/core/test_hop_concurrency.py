"""Hop reservations racing on one database file never over-admit (docs/architecture.md).

Each contender is a separate connection (its own ``Store.open``), as two fleets
or two processes sharing ``nanoslack.db`` would be. If the count and the insert
were two transactions, contenders would each see a count below the limit
between another's count and its insert, and all insert.

Two schedules: a free race (a barrier releases every contender at once, many
rounds), and connections taking SQLite's write lock strictly in turn, which
makes the worst interleaving happen every time instead of now and then: SQLite's
busy handler lets the connection that just committed win the lock back before
the sleeping waiters wake, so a free race shows a split transaction only in a
few rounds out of a hundred.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import Engine, event

from nanoslack.store import Store, sqlite_url

CONTENDERS = 8
MAX_HOPS = 3
ROUNDS = 25


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[list[Store]]:
    url = sqlite_url(str(tmp_path / "shared.db"))
    Store.open(url).close()  # create the schema once, not in a race
    opened = [Store.open(url) for _ in range(CONTENDERS)]
    yield opened
    for store in opened:
        store.close()


class Turns:
    """Round-robin over the contenders' transactions: a BEGIN waits for its
    connection's turn, a COMMIT or ROLLBACK passes the turn on; a contender that
    is done leaves the rotation."""

    def __init__(self, stores: list[Store]) -> None:
        self._cond = threading.Condition()
        self._active = list(range(len(stores)))
        self._turn = 0
        self._listeners: list[tuple[object, str, Callable[[object], None]]] = []
        for i, store in enumerate(stores):
            self._listeners += [
                (store.db.engine, "begin", self._waiter(i)),
                (store.db.engine, "commit", self._passer(i)),
                (store.db.engine, "rollback", self._passer(i)),
            ]
        for target, name, fn in self._listeners:
            event.listen(target, name, fn)
        for store in stores:
            _run_first(store.db.engine, "begin")

    def close(self) -> None:
        for target, name, fn in self._listeners:
            event.remove(target, name, fn)

    def _waiter(self, i: int) -> Callable[[object], None]:
        def wait(_conn: object) -> None:
            with self._cond:
                if not self._cond.wait_for(lambda: self._turn == i, timeout=10):
                    raise TimeoutError(f"contender {i} never got its turn")

        return wait

    def _passer(self, i: int) -> Callable[[object], None]:
        def pass_on(_conn: object) -> None:
            with self._cond:
                self._advance(i)

        return pass_on

    def _advance(self, i: int) -> None:
        if self._turn != i or not self._active:
            return
        position = self._active.index(i) if i in self._active else -1
        self._turn = self._active[(position + 1) % len(self._active)]
        self._cond.notify_all()

    def leave(self, i: int) -> None:
        with self._cond:
            was_turn = self._turn == i
            position = self._active.index(i)
            self._active.remove(i)
            if was_turn and self._active:
                self._turn = self._active[position % len(self._active)]
            self._cond.notify_all()


def _run_first(engine: Engine, name: str) -> None:
    """Move the listener added last in front of the others: the turn must be
    waited for *before* the store's own BEGIN IMMEDIATE takes the lock
    (``insert=True`` does not reorder listeners inherited by a live connection)."""
    listeners = list(getattr(engine.dispatch, name))
    for fn in listeners:
        event.remove(engine, name, fn)
    for fn in [listeners[-1], *listeners[:-1]]:
        event.listen(engine, name, fn)


def _race(stores: list[Store], room: str, scope: str, turns: Turns | None = None) -> list[int | None]:
    barrier = threading.Barrier(len(stores))

    def contend(i: int) -> int | None:
        instance = "dana" if scope == "identity" else f"bot{i}"
        barrier.wait(timeout=10)
        try:
            return stores[i].hops.reserve(
                room=room,
                instance=instance,
                ts=f"1700000000.{i:06d}",
                bot_id=f"B{i}",
                max_hops=MAX_HOPS,
                scope=scope,
            )
        finally:
            if turns is not None:
                turns.leave(i)

    with ThreadPoolExecutor(len(stores)) as pool:
        return list(pool.map(contend, range(len(stores))))


def _assert_exactly_max_hops(stores: list[Store], room: str, hops: list[int | None]) -> None:
    admitted = [h for h in hops if h is not None]
    assert len(admitted) == MAX_HOPS, f"{room}: {len(admitted)} of {len(hops)} admitted, hops={hops}"
    held = sum(c.count for c in stores[0].hops.counts() if c.room == room)
    assert held == MAX_HOPS, f"{room}: {held} hop rows stored"


@pytest.mark.parametrize("scope", ["room", "identity"])
def test_connections_racing_on_one_file_admit_exactly_max_hops(stores: list[Store], scope: str) -> None:
    for round_no in range(ROUNDS):
        room = f"G{round_no:04d}"
        _assert_exactly_max_hops(stores, room, _race(stores, room, scope))


@pytest.mark.parametrize("scope", ["room", "identity"])
def test_connections_taking_the_lock_in_turn_admit_exactly_max_hops(stores: list[Store], scope: str) -> None:
    for round_no in range(3):
        room = f"G{round_no:04d}"
        turns = Turns(stores)
        try:
            hops = _race(stores, room, scope, turns)
        finally:
            turns.close()
        _assert_exactly_max_hops(stores, room, hops)
