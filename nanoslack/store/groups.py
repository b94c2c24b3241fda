"""TODO(store): repository for the groups table(s); see nanoslack/store/tables.py."""

from __future__ import annotations

from nanoslack.store.db import Database


class MessagingGroups:
    def __init__(self, db: Database) -> None:
        self._db = db
