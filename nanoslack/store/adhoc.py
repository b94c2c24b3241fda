"""One operator statement on a database server (``nanoslack q`` on PostgreSQL, docs/data.md):
the operator's SQL, run as written and committed on its own, as ``psql`` would."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import create_engine
from sqlalchemy.exc import DBAPIError

from nanoslack.store.engine import parse_url

CONNECT_TIMEOUT_S = 5


@dataclass(frozen=True)
class Answer:
    """A read's column names and rows, or a write's count of rows changed."""

    columns: list[str] | None
    rows: list[tuple[object, ...]]
    changed: int = 0


class StatementError(Exception):
    """The database refused the statement; the message is the server's first line."""


def run_statement(url: str, sql: str) -> Answer:
    engine = create_engine(parse_url(url), connect_args={"connect_timeout": CONNECT_TIMEOUT_S})
    try:
        raw = engine.raw_connection()
        try:
            # The DB-API cursor, with no parameters: a `%` in the operator's SQL stays a `%`.
            cursor = raw.cursor()
            cursor.execute(sql)
            if cursor.description is not None:
                answer = Answer(
                    [str(d[0]) for d in cursor.description], [tuple(r) for r in cursor.fetchall()]
                )
            else:
                answer = Answer(None, [], max(cursor.rowcount, 0))
            raw.commit()
            return answer
        finally:
            raw.close()
    except DBAPIError as exc:
        raise StatementError(_first_line(exc.orig or exc)) from None
    except Exception as exc:
        if type(exc).__module__.startswith("psycopg"):
            raise StatementError(_first_line(exc)) from None
        raise
    finally:
        engine.dispose()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
