"""The fast path (``nanoslack.store.fastpath``) runs a ``text()`` statement straight on the
driver; what it sends must mean what SQLAlchemy's ordinary path means, on SQLite and on
PostgreSQL alike, whatever the literals hold."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from nanoslack.store import Store
from nanoslack.store.errors import StoreError
from nanoslack.store.fastpath import (
    hot_all,
    hot_execute,
    hot_execute_in_order,
    hot_first,
    hot_many,
    hot_many_in_order,
    hot_rows,
    in_order,
    spell,
    spell_positional,
)

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


def test_a_question_mark_or_percent_in_a_literal_is_no_positional_parameter(store: Store) -> None:
    """``hot_rows`` (a batch's values, given in order) leaves a ``?`` or ``%`` inside a
    literal alone on both drivers: only the statement's named parameters take values."""
    stmt = text("SELECT 'why?', :p0, '50% off?', :p1 UNION ALL SELECT 'a?b', :p2, '?', :p3")
    with store.transaction() as conn:
        rows = hot_rows(conn, stmt, ["x", 1, "y", 2])
    assert rows == [("why?", "x", "50% off?", 1), ("a?b", "y", "?", 2)]


def test_a_positional_statement_names_each_parameter_once() -> None:
    with pytest.raises(StoreError, match="once"):
        spell_positional(text("SELECT :p0, :p0"), "postgresql")
    assert spell_positional(text("SELECT :p0, '?%', :p1"), "postgresql") == "SELECT %s, '?%%', %s"
    assert spell_positional(text("SELECT :p0, '?%', :p1"), "sqlite") == "SELECT ?, '?%', ?"


def test_a_batch_of_inbox_rows_records_each_once(store: Store) -> None:
    """The multi-row insert binds each row's values to its own columns (a literal ``?``
    in a payload included) and says which rows were new."""
    from nanoslack.inbound import Inbound

    def msg(ts: str, text_: str) -> Inbound:
        return Inbound(
            instance="a",
            team_id=None,
            channel="C1",
            channel_type="im",
            ts=ts,
            thread_ts=None,
            user="U1",
            bot_id=None,
            text=text_,
            mentions=(),
            event_type="message",
        )

    batch = [msg(f"1.{i}", f"really? {i}%") for i in range(5)] + [msg("1.0", "twin")]
    assert store.inbox.record_many(batch) == [True] * 5 + [False]
    assert store.inbox.record_many(batch[:2]) == [False, False]
    got = store.inbox.message(batch[3].key)
    assert got is not None and got.text == "really? 3%"


def test_values_given_in_order_bind_to_the_parameters_they_name(store: Store) -> None:
    """``hot_execute_in_order``/``hot_many_in_order`` bind a row's values by position, in the
    order ``in_order`` checked, and leave a ``?`` or ``%`` in a literal alone."""
    insert = in_order(
        text("INSERT INTO schema_meta (value, key) VALUES (:value || ' 50%? 09:30', :key)"), ("value", "key")
    )
    with store.transaction() as conn:
        assert hot_execute_in_order(conn, insert, ("v1", "inorder-1")) == 1
        hot_many_in_order(conn, insert, [("v2", "inorder-2"), ("v3", "inorder-3")])
        hot_many_in_order(conn, insert, [])
    read = text("SELECT key, value FROM schema_meta WHERE key LIKE 'inorder-%' ORDER BY key")
    with store.transaction() as conn:
        rows = hot_all(conn, read, {})
    assert rows == [(f"inorder-{i}", f"v{i} 50%? 09:30") for i in (1, 2, 3)]


def test_a_statement_whose_values_come_in_another_order_is_refused_at_once() -> None:
    stmt = text("UPDATE t SET a = :a WHERE b = :b")
    assert in_order(stmt, ("a", "b")) is stmt
    with pytest.raises(StoreError, match="binds"):
        in_order(stmt, ("b", "a"))


def test_only_the_thread_holding_a_transaction_joins_it(store: Store) -> None:
    """A nested ``transaction()`` joins the open one only in the thread that holds it;
    another thread's call is a transaction of its own (it waits for the lock)."""
    import threading

    from nanoslack.store.database import JoinedTransaction, Transaction

    seen: list[object] = []
    with store.transaction():
        assert isinstance(store.transaction(), JoinedTransaction)
        other = threading.Thread(target=lambda: seen.append(store.transaction()))
        other.start()
        other.join(timeout=10)
        assert not other.is_alive()
    assert len(seen) == 1 and isinstance(seen[0], Transaction)
    assert isinstance(store.transaction(), Transaction)  # nothing open: a new one
