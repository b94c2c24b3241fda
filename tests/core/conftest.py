"""Router, gate, store and operator-CLI tests: plain code against a real database
(``store``, ``sql`` and ``db_arg`` come from tests/conftest.py: SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest

from nanoslack.gate import Gate
from nanoslack.router import Router
from nanoslack.store import Store
from tests.core.core_helpers import make_gate, make_router


@pytest.fixture
def router(store: Store) -> Router:
    return make_router(store)


@pytest.fixture
def gate(store: Store) -> Gate:
    return make_gate(store)
