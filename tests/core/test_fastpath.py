"""The fast path (``nanoslack.store.fastpath``) runs a ``text()`` statement straight on the
driver; what it sends must mean what SQLAlchemy's ordinary path means, on SQLite and on
PostgreSQL alike, whatever the literals hold."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from nanoslack.store import Store
from nanoslack.store.fastpath import hot_all, hot_execute, hot_first, hot_many, spell

# (statement, parameters, the row it reads): colons inside literals, after a space and
# before a word; PostgreSQL's ``::`` cast (written as CAST on SQLite, which has none);
# ``%`` (psycopg's own marker) in a literal and in a LIKE pattern; a quote doubled; a
# backslash-escaped colon, which ``text()`` reads as a colon. (``text()`` reads
# ``:n::integer`` as no parameter at all: a cast of a parameter is ``(:n)::integer``.)
COMMON: list[tuple[str, dict[str, Any], tuple[Any, ...]]] = [
    ("SELECT '12:30:00', :x", {"x": 1}, ("12:30:00", 1)),
    ("SELECT 'a:b', 'slack:U0ME', :x", {"x": "y"}, ("a:b", "slack:U0ME", "y")),
    ("SELECT '100%', :x", {"x": 2}, ("100%", 2)),
    ("SELECT 'it''s: fine', :x", {"x": 3}, ("it's: fine", 3)),
    ("SELECT 'at \\:noon', :x", {"x": 4}, ("at :noon", 4)),
    ("SELECT :a || ':' || :b", {"a": "p", "b": "q"}, ("p:q",)),
    ("SELECT CASE WHEN 'x:y' LIKE 'x:%' THEN :yes ELSE 'no' END", {"yes": "yes"}, ("yes",)),
]
POSTGRES_ONLY: list[tuple[str, dict[str, Any], tuple[Any, ...]]] = [
    ("SELECT (:n)::integer + 1, '1:2'::text", {"n": "41"}, (42, "1:2")),
    ("SELECT CAST(:n AS text)::integer, 'x'::text", {"n": "7"}, (7, "x")),
]


def _cases(store: Store) -> list[tuple[str, dict[str, Any], tuple[Any, ...]]]:
    return COMMON + ([] if store.db.is_sqlite else POSTGRES_ONLY)


def test_statements_with_colons_percents_and_casts_read_the_same_on_the_fast_path(store: Store) -> None:
    for sql, params, expected in _cases(store):
        stmt = text(sql)
        with store.transaction() as conn:
            fast = hot_first(conn, stmt, params)
            ordinary = conn.execute(stmt, params).first()
        assert fast == expected, sql
        assert ordinary is not None and tuple(ordinary) == expected, sql
        with store.transaction() as conn:
            assert hot_all(conn, stmt, params) == [expected], sql


def test_a_colon_inside_a_literal_is_not_a_parameter_in_writes_either(store: Store) -> None:
    """A write whose literal has ``:word`` in it stores the literal, and ``hot_many`` binds
    only the real parameters."""
    insert = text(
        "INSERT INTO schema_meta (key, value) VALUES (:key, 'at 09:30 see slack:U0ME \\:later %s %(x)s')"
    )
    with store.transaction() as conn:
        assert hot_execute(conn, insert, {"key": "fastpath-1"}) == 1
        hot_many(conn, insert, [{"key": "fastpath-2"}, {"key": "fastpath-3"}])
    read = text("SELECT value FROM schema_meta WHERE key LIKE 'fastpath-%' ORDER BY key")
    with store.transaction() as conn:
        values = [r[0] for r in hot_all(conn, read, {})]
    assert values == ["at 09:30 see slack:U0ME :later %s %(x)s"] * 3


def test_the_fast_path_spells_parameters_as_each_driver_takes_them() -> None:
    sql = "SELECT * FROM t WHERE a = :a AND b = 'x:y' AND c LIKE 'p%' AND d = (:d)::int"
    assert spell(sql, "postgresql") == (
        "SELECT * FROM t WHERE a = %(a)s AND b = 'x:y' AND c LIKE 'p%%' AND d = (%(d)s)::int"
    )
    assert spell(sql, "sqlite") == sql


@pytest.mark.parametrize("module", ["inbox", "messages", "outbox", "turns", "hops", "groups", "history"])
def test_every_statement_of_a_hot_module_spells_the_same_as_sqlalchemy_sends_it(module: str) -> None:
    """The fast path's spelling is SQLAlchemy's own compile of the statement: what
    ``conn.execute`` would send through psycopg, so the two paths cannot disagree."""
    import importlib

    from sqlalchemy.dialects import postgresql
    from sqlalchemy.sql.elements import TextClause

    mod = importlib.import_module(f"nanoslack.store.{module}")
    statements = [v for v in vars(mod).values() if isinstance(v, TextClause)]
    assert statements
    pg = postgresql.psycopg.dialect()  # type: ignore[no-untyped-call]  # untyped in SQLAlchemy
    for stmt in statements:
        if stmt._bindparams and any(b.expanding for b in stmt._bindparams.values()):
            continue  # expanded per call: only the ordinary path runs these
        assert spell(stmt.text, "postgresql") == str(stmt.compile(dialect=pg)), stmt.text
