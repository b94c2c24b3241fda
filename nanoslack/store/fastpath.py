"""The fast path: per-message statements straight to the DB-API driver.

SQLAlchemy's execute path costs ~35 µs a statement, more than a whole stage may spend on
a message (docs/architecture.md), so the hot statements skip it and run on the
transaction's own driver connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Dialect, TextClause, text
from sqlalchemy.dialects import postgresql, sqlite

from nanoslack.store.engine import driver
from nanoslack.store.errors import StoreError

# What each driver takes: sqlite3 reads ``:name`` itself (SQLAlchemy's own pysqlite
# dialect would spell it ``?``), psycopg ``%(name)s``.
_DIALECTS: dict[str, Dialect] = {
    "sqlite": sqlite.dialect(paramstyle="named"),
    "postgresql": postgresql.psycopg.dialect(),  # type: ignore[no-untyped-call]  # untyped in SQLAlchemy
}

# The same, with positional parameters (``hot_rows``).
_POSITIONAL: dict[str, Dialect] = {
    "sqlite": sqlite.dialect(paramstyle="qmark"),
    "postgresql": postgresql.psycopg.dialect(paramstyle="format"),  # type: ignore[no-untyped-call]  # untyped in SQLAlchemy
}

# Where a statement keeps its positional spelling (beside its named one, ``_driver_sql``).
_POSITIONAL_KEY = {name: f"{name}?" for name in _POSITIONAL}


def spell(sql: str, dialect: str) -> str:
    """``sql``, a ``text()`` statement, compiled by SQLAlchemy for ``dialect``'s driver
    exactly as its ordinary execute path would send it: ``%(name)s`` with ``%`` doubled
    for psycopg, ``::`` casts and colons inside words kept, a backslash-escaped colon
    read as a colon."""
    return str(text(sql).compile(dialect=_DIALECTS[dialect]))


def _driver_sql(conn: Connection, stmt: TextClause) -> str | None:
    """What the driver runs for ``stmt``; None when only SQLAlchemy's path can run it
    (another database). Kept on the statement itself, under its dialect's name: the
    lookup is on the hot path (one dictionary read), and a statement built for one call
    takes its spelling with it when it goes."""
    name = conn.dialect.name
    sql: str | None = stmt.__dict__.get(name)
    if sql is None and name in _DIALECTS:
        sql = stmt.__dict__[name] = spell(stmt.text, name)
    return sql


def hot_execute(conn: Connection, stmt: TextClause, params: dict[str, Any]) -> int:
    """Run a per-message write; its rowcount.

    The statement goes straight to the driver (sqlite3 or psycopg) on the transaction's
    own connection: SQLAlchemy's execute path costs ~35 µs a statement, more than a whole
    stage may spend on a message (docs/architecture.md). Other databases take the
    ordinary path.
    """
    sql = _driver_sql(conn, stmt)
    if sql is None:
        return int(conn.execute(stmt, params).rowcount)
    return int(driver(conn).execute(sql, params).rowcount)


def hot_first(conn: Connection, stmt: TextClause, params: dict[str, Any]) -> tuple[Any, ...] | None:
    """``hot_execute`` for a per-message read: the first row, or None."""
    sql = _driver_sql(conn, stmt)
    row = conn.execute(stmt, params).first() if sql is None else driver(conn).execute(sql, params).fetchone()
    return tuple(row) if row is not None else None


def hot_all(conn: Connection, stmt: TextClause, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """``hot_first`` for a read of several rows (a turn's thread, its pending messages)."""
    sql = _driver_sql(conn, stmt)
    if sql is None:
        return [tuple(r) for r in conn.execute(stmt, params).all()]
    return [tuple(r) for r in driver(conn).execute(sql, params).fetchall()]


def hot_exists(conn: Connection, stmt: TextClause, params: dict[str, Any]) -> bool:
    return hot_first(conn, stmt, params) is not None


def hot_many(conn: Connection, stmt: TextClause, rows: Sequence[dict[str, Any]]) -> None:
    """``hot_execute`` for a batch's rows of one statement: one call, and on PostgreSQL
    one round trip (psycopg pipelines ``executemany``)."""
    if not rows:
        return
    sql = _driver_sql(conn, stmt)
    if sql is None:
        conn.execute(stmt, list(rows))
    elif conn.dialect.name == "sqlite":
        driver(conn).executemany(sql, rows)
    else:
        driver(conn).cursor().executemany(sql, rows)


def hot_execute_in_order(conn: Connection, stmt: TextClause, params: Sequence[Any]) -> int:
    """``hot_execute`` with the values given in the order of ``in_order``'s names: no
    dictionary to build, and the driver binds by position instead of looking each name up
    (what binding a per-message row cost most, after the writes themselves)."""
    return int(driver(conn).execute(_positional_sql(conn, stmt), params).rowcount)


def hot_many_in_order(conn: Connection, stmt: TextClause, rows: Sequence[Sequence[Any]]) -> None:
    """``hot_many`` with each row's values in the order of ``in_order``'s names."""
    if not rows:
        return
    sql = _positional_sql(conn, stmt)
    if conn.dialect.name == "sqlite":
        driver(conn).executemany(sql, rows)
    else:
        driver(conn).cursor().executemany(sql, rows)


def in_order(stmt: TextClause, names: Sequence[str]) -> TextClause:
    """``stmt``, checked to name its parameters exactly ``names`` in that order, each once:
    the order ``hot_execute_in_order`` and ``hot_many_in_order`` take the values in. Raises
    at import when a statement and the tuples built for it disagree."""
    compiled = stmt.compile(dialect=_POSITIONAL["sqlite"])
    order = tuple(compiled.positiontup or ())
    if order != tuple(names):
        raise StoreError(f"statement binds {order}, not {tuple(names)}")
    return stmt


def _positional_sql(conn: Connection, stmt: TextClause) -> str:
    name = conn.dialect.name
    key = _POSITIONAL_KEY.get(name)
    if key is None:
        raise StoreError(f"positional statements are not supported on {name}")
    sql: str | None = stmt.__dict__.get(key)
    if sql is None:
        sql = stmt.__dict__[key] = spell_positional(stmt, name)
    return sql


def hot_rows(conn: Connection, stmt: TextClause, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """A statement of many parameters (a multi-row VALUES list, a long IN list), its rows.

    ``stmt`` names its parameters as any other (``:p0``, ``:p1``…, each once);
    ``params`` gives their values in the order they appear, so a batch's values need
    no dictionary. SQLAlchemy compiles it for the driver's positional style (``?``,
    psycopg's ``%s`` with ``%`` doubled), so a literal holding ``?`` or ``%`` stays a
    literal."""
    return [tuple(r) for r in driver(conn).execute(_positional_sql(conn, stmt), params).fetchall()]


def spell_positional(stmt: TextClause, dialect: str) -> str:
    """``stmt`` compiled for ``dialect``'s driver with positional parameters; each
    parameter must appear once (the values are given in that order)."""
    compiled = stmt.compile(dialect=_POSITIONAL[dialect])
    order = compiled.positiontup or []
    if len(set(order)) != len(order):
        raise StoreError("a positional statement names each parameter once")
    return str(compiled)


def positional_names(count: int, prefix: str = "p") -> list[str]:
    """``:p0``… ``:p<count-1>``, the parameters of a statement ``hot_rows`` runs."""
    return [f":{prefix}{i}" for i in range(count)]
