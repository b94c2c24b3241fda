"""``q``: run one SQL statement against the nanoslack store (docs/data.md).

The store is found as every other command finds it: a database named first (an SQLite
file or an SQLAlchemy URL, as a first argument or ``--db``), else ``.env`` under the
environment (``DATABASE_URL``, else ``NANOSLACK_DB``; ``--env-file``). Reads print rows
like the sqlite3 CLI in list mode (``|`` between columns, NULL as empty); writes print
the number of rows they changed. On an SQLite file given by name it needs only the
standard library (``scripts/q.py`` with whatever ``python3`` is on the host); reading
``.env`` and PostgreSQL need nanoslack installed.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

PROG = "q"
# The fleet writes in WAL mode and holds the write lock only briefly; wait rather
# than fail with "database is locked" while it runs.
BUSY_TIMEOUT_S = 5.0
EXIT_SQL_ERROR = 1
EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        usage=f"{PROG} [DB] SQL [--db DB] [--env-file PATH] [--header]",
        description="Run one SQL statement against the nanoslack store (SQLite or PostgreSQL).",
        epilog=f'example: {PROG} "SELECT platform_id, instance FROM messaging_groups" --header',
    )
    p.add_argument("first", metavar="DB", help="SQLite file or SQLAlchemy URL (optional: see --db)")
    p.add_argument("sql", nargs="?", metavar="SQL", help="one SQL statement")
    p.add_argument("--db", help="SQLite file or SQLAlchemy URL (default: DATABASE_URL / NANOSLACK_DB)")
    p.add_argument("--env-file", type=Path, default=None, help="read this file instead of ./.env")
    p.add_argument("--header", action="store_true", help="print the column names first")
    return p


class Usage(Exception):
    """Where the store is cannot be told; the message says what to give."""


def _looks_like_a_database(text: str) -> bool:
    return "://" in text or text.endswith((".db", ".sqlite", ".sqlite3")) or Path(text).is_file()


def store_url(named: str | None, env_file: Path | None) -> str:
    """The database ``named`` (a URL, or an SQLite file relative to the cwd), else the
    fleet's rule (``nanoslack.config.database_url``) on ``.env`` under the environment."""
    if named:
        return named if "://" in named else "sqlite:///" + str(Path(named).expanduser().resolve())
    try:
        from nanoslack.config import ConfigError, database_url, read_env_file
    except ImportError:
        raise Usage(
            "name the database file (reading .env needs nanoslack installed: .venv/bin/nanoslack q)"
        ) from None
    path = (env_file or Path.cwd() / ".env").expanduser().resolve()
    env = read_env_file(path)
    env.update(os.environ)
    try:
        return database_url(env, path.parent)
    except ConfigError as exc:
        raise Usage(str(exc)) from None


def format_value(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def write_rows(out: TextIO, columns: list[str] | None, rows: Iterable[tuple[object, ...]]) -> None:
    if columns is not None:
        out.write("|".join(columns) + "\n")
    for row in rows:
        out.write("|".join(format_value(v) for v in row) + "\n")


def connect_existing(path: Path) -> sqlite3.Connection:
    # mode=rw: sqlite3.connect would otherwise create an empty database for a
    # mistyped path and the UPDATE would "succeed" with 0 rows.
    uri = path.resolve().as_uri() + "?mode=rw"
    # isolation_level=None: each statement commits on its own, as in the sqlite3 CLI.
    return sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)


def run(db: Path, sql: str, header: bool, out: TextIO) -> None:
    conn = connect_existing(db)
    try:
        cursor = conn.execute(sql)
        if cursor.description is not None:
            # Also covers INSERT/UPDATE … RETURNING: the rows are the answer.
            columns = [d[0] for d in cursor.description] if header else None
            write_rows(out, columns, cursor)
        else:
            out.write(f"{max(cursor.rowcount, 0)}\n")
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.sql is None:
        if _looks_like_a_database(args.first):
            parser.error("no SQL statement given")
        named, sql = args.db, args.first
    else:
        named, sql = args.first, args.sql
    try:
        url = store_url(named, args.env_file)
    except Usage as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if url.startswith("sqlite:///"):
            return _on_sqlite(Path(url.removeprefix("sqlite:///")), sql, args.header)
        return _on_server(url, sql, args.header)
    except BrokenPipeError:
        # `q … | head`: the reader left; not an error worth a traceback. Point stdout
        # at devnull so the interpreter's final flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _on_sqlite(db: Path, sql: str, header: bool) -> int:
    if not db.is_file():
        what = "is not a file" if db.exists() else "does not exist"
        print(f"{PROG}: database {_shown(db)} {what} (nothing created)", file=sys.stderr)
        return EXIT_USAGE
    try:
        run(db, sql, header, sys.stdout)
        sys.stdout.flush()
    except sqlite3.Error as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return EXIT_SQL_ERROR
    return 0


def _on_server(url: str, sql: str, header: bool) -> int:
    from nanoslack.store.adhoc import StatementError, run_statement

    try:
        answer = run_statement(url, sql)
    except StatementError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return EXIT_SQL_ERROR
    if answer.columns is None:
        sys.stdout.write(f"{answer.changed}\n")
    else:
        write_rows(sys.stdout, answer.columns if header else None, answer.rows)
    sys.stdout.flush()
    return 0


def _shown(db: Path) -> str:
    """The path as the operator would recognise it: relative to the cwd when inside it."""
    try:
        return str(db.relative_to(Path.cwd()))
    except ValueError:
        return str(db)


if __name__ == "__main__":
    sys.exit(main())
