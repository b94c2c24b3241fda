"""Rows of one hot INSERT kept back for the end of a pipeline batch (``batched``): written in
one call then, or before anything reads the table (``flush``). On an exception they are dropped
with the transaction they belonged to. A row is its values in the statement's parameter order
(``fastpath.in_order``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import TextClause

from nanoslack.store.database import Database
from nanoslack.store.fastpath import hot_many_in_order


class WriteBehind:
    def __init__(self, db: Database, statement: TextClause) -> None:
        self._db = db
        self._statement = statement
        # The rows kept for the end of a ``batched`` stretch, else None.
        self._rows: list[Sequence[Any]] | None = None
        # The thread whose batch it is: the one holding the store's transaction.
        self._owner: int | None = None

    def keep(self, params: Sequence[Any]) -> bool:
        """Inside this thread's ``batched`` stretch: the row is kept for later and True;
        else False and the caller writes it now, in a transaction of its own. No lock
        taken here: the stretch runs inside the batch's transaction, which holds the
        store's lock, so only the thread that owns it can see rows to keep (another
        thread writes its row itself, once it gets the lock)."""
        if self._rows is None or self._owner != threading.get_ident():
            return False
        self._rows.append(params)
        return True

    @contextmanager
    def batched(self) -> Iterator[None]:
        """Call it inside a transaction of the store's (the pipeline's batch)."""
        if self._rows is not None:
            yield
            return
        self._rows = []
        self._owner = threading.get_ident()
        try:
            yield
            self.flush()
        finally:
            self._rows = None
            self._owner = None

    def flush(self) -> None:
        if not self._rows:  # the common case, without taking the store's lock
            return
        with self._db.transaction() as conn:
            # Under the lock: only the thread whose batch it is sees its rows here.
            rows = self._rows
            if rows:
                self._rows = []
                hot_many_in_order(conn, self._statement, rows)
