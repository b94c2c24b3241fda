"""``q``: run one SQL statement against the nanoslack SQLite store (docs/data.md).

Reads print rows like the sqlite3 CLI in list mode (``|`` between columns, NULL as
empty); writes print the number of rows they changed. Standard library only:
operators run it ad hoc with whatever ``python3`` is on the host.
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
        description="Run one SQL statement against a nanoslack SQLite database.",
        epilog='example: q data/nanoslack.db "SELECT platform_id, instance FROM messaging_groups" --header',
    )
    p.add_argument("db", help="SQLite database file (must exist)")
    p.add_argument("sql", help="one SQL statement")
    p.add_argument("--header", action="store_true", help="print the column names first")
    return p


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
    args = build_parser().parse_args(argv)
    db = Path(args.db)
    if not db.is_file():
        what = "is not a file" if db.exists() else "does not exist"
        print(f"{PROG}: database {db} {what} (nothing created)", file=sys.stderr)
        return EXIT_USAGE
    try:
        run(db, args.sql, args.header, sys.stdout)
        sys.stdout.flush()
    except sqlite3.Error as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return EXIT_SQL_ERROR
    except BrokenPipeError:
        # `q … | head`: the reader left; not an error worth a traceback. Point stdout
        # at devnull so the interpreter's final flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
