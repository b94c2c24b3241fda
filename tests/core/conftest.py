"""Router, gate, store and operator-CLI tests: plain code against a real SQLite file."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nanoslack.gate import Gate
from nanoslack.router import Router
from nanoslack.store import Store
from tests.core.core_helpers import BOT_USER, INSTANCE, OWNER


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "nanoslack.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    s = Store.open("sqlite:///" + str(db_path))
    yield s
    s.close()


@pytest.fixture
def router(store: Store) -> Router:
    return Router(store, instance=INSTANCE, bot_user_id=BOT_USER)


@pytest.fixture
def gate(store: Store) -> Gate:
    return Gate(store, instance=INSTANCE, owners=[OWNER])


@pytest.fixture
def sql(db_path: Path) -> Callable[[str], int]:
    """An operator's q.py: a separate sqlite3 connection, autocommit."""

    def run(statement: str) -> int:
        conn = sqlite3.connect(db_path, isolation_level=None, timeout=5)
        try:
            return conn.execute(statement).rowcount
        finally:
            conn.close()

    return run
