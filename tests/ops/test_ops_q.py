"""scripts/q.py, run as operators run it (docs/data.md)."""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

Runner = Callable[..., Any]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "data" / "nanoslack.db"
    path.parent.mkdir()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(
        """
        CREATE TABLE messaging_groups (
            platform_id TEXT, instance TEXT, unknown_sender_policy TEXT,
            engage_mode TEXT, engage_pattern TEXT
        );
        INSERT INTO messaging_groups VALUES
            ('slack:C0AAAAAAA', 'dana', 'request_approval', 'mention-sticky', NULL),
            ('slack:C0AAAAAAA', 'eli', 'request_approval', 'mention-sticky', NULL),
            ('slack:D0BBBBBBB', 'dana', 'decline_notify', 'pattern', '.');
        """
    )
    conn.commit()
    conn.close()
    return path


def policies(db: Path) -> list[tuple[str, str, str]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(
            "SELECT platform_id, instance, unknown_sender_policy FROM messaging_groups ORDER BY rowid"
        ).fetchall()
    finally:
        conn.close()


def test_select_prints_pipe_separated_rows_with_null_as_empty(run: Runner, db: Path) -> None:
    r = run(
        "q.py", str(db), "SELECT platform_id, instance, engage_pattern FROM messaging_groups", cwd=db.parent
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "slack:C0AAAAAAA|dana|\nslack:C0AAAAAAA|eli|\nslack:D0BBBBBBB|dana|.\n"


def test_header_flag_prints_column_names_first(run: Runner, db: Path) -> None:
    r = run(
        "q.py",
        str(db),
        "SELECT instance, engage_mode AS mode FROM messaging_groups LIMIT 1",
        "--header",
        cwd=db.parent,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "instance|mode\ndana|mention-sticky\n"


def test_seed_update_line_works_verbatim_and_prints_row_count(run: Runner, db: Path) -> None:
    # The seed's operator line, from the directory that holds data/.
    r = run(
        "q.py",
        "data/nanoslack.db",
        "UPDATE messaging_groups SET unknown_sender_policy='public' WHERE platform_id='slack:C0AAAAAAA'",
        cwd=db.parent.parent,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "2\n"
    assert policies(db) == [
        ("slack:C0AAAAAAA", "dana", "public"),
        ("slack:C0AAAAAAA", "eli", "public"),
        ("slack:D0BBBBBBB", "dana", "decline_notify"),
    ]


def test_write_matching_nothing_prints_zero(run: Runner, db: Path) -> None:
    r = run("q.py", str(db), "DELETE FROM messaging_groups WHERE instance='nobody'", cwd=db.parent)
    assert (r.returncode, r.stdout) == (0, "0\n")


def test_bad_statement_exits_1_with_sqlite_message(run: Runner, db: Path) -> None:
    r = run("q.py", str(db), "SELEC * FROM messaging_groups", cwd=db.parent)
    assert r.returncode == 1
    assert r.stderr.strip() == 'q: near "SELEC": syntax error'
    assert r.stdout == ""


def test_unknown_table_exits_1_with_sqlite_message(run: Runner, db: Path) -> None:
    r = run("q.py", str(db), "SELECT * FROM nope", cwd=db.parent)
    assert (r.returncode, r.stderr.strip()) == (1, "q: no such table: nope")


@pytest.mark.parametrize("args", [[], ["only-a-db.db"]], ids=["no-args", "no-sql"])
def test_missing_arguments_exit_2(run: Runner, db: Path, args: list[str]) -> None:
    r = run("q.py", *args, cwd=db.parent)
    assert r.returncode == 2
    assert "usage:" in r.stderr


def test_missing_database_exits_2_and_creates_nothing(run: Runner, tmp_path: Path) -> None:
    r = run("q.py", "data/typo.db", "SELECT 1", cwd=tmp_path)
    assert r.returncode == 2
    assert "data/typo.db does not exist" in r.stderr
    assert not (tmp_path / "data").exists()


def test_waits_for_a_writer_holding_the_lock_instead_of_failing(run: Runner, db: Path) -> None:
    # The fleet holds the write lock briefly; q.py must wait (busy timeout), not fail.
    import threading

    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    timer = threading.Timer(0.5, lambda: holder.execute("COMMIT"))
    timer.start()
    try:
        r = run("q.py", str(db), "UPDATE messaging_groups SET engage_mode='mention'", cwd=db.parent)
    finally:
        timer.join()
        holder.close()
    assert (r.returncode, r.stdout, r.stderr) == (0, "3\n", "")


def test_runs_without_any_site_packages(run: Runner, db: Path) -> None:
    # Operators run it ad hoc with whatever python3 is around: -I -S hides every
    # installed package, so only the standard library is importable.
    r = run(
        "q.py",
        str(db),
        "SELECT count(*) FROM messaging_groups",
        cwd=db.parent,
        python=(sys.executable, "-I", "-S"),
    )
    assert (r.returncode, r.stdout) == (0, "3\n"), r.stderr


# -- finding the store as every other command does ------------------------------------------------


def _nanoslack_q(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Any:
    import subprocess

    from tests.ops.conftest import clean_env

    return subprocess.run(
        [sys.executable, "-m", "nanoslack", "q", *args],
        cwd=cwd,
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=60,
    )


COUNT = "SELECT count(*) FROM messaging_groups"


def test_q_reads_the_store_the_env_file_names(db: Path) -> None:
    home = db.parent.parent
    (home / ".env").write_text("NANOSLACK_DB=data/nanoslack.db\n")
    elsewhere = home / "elsewhere"
    elsewhere.mkdir()
    r = _nanoslack_q(COUNT, "--env-file", str(home / ".env"), cwd=elsewhere)
    assert (r.returncode, r.stdout) == (0, "3\n"), r.stderr
    r = _nanoslack_q(COUNT, cwd=home)  # ./.env
    assert (r.returncode, r.stdout) == (0, "3\n"), r.stderr


def test_q_takes_db_and_database_url_like_the_other_commands(db: Path, tmp_path: Path) -> None:
    r = _nanoslack_q(COUNT, "--db", str(db), cwd=tmp_path)
    assert (r.returncode, r.stdout) == (0, "3\n"), r.stderr
    r = _nanoslack_q(COUNT, cwd=tmp_path, env={"DATABASE_URL": f"sqlite:///{db}"})
    assert (r.returncode, r.stdout) == (0, "3\n"), r.stderr
    r = _nanoslack_q(str(db), COUNT, cwd=tmp_path)  # a path argument still works
    assert (r.returncode, r.stdout) == (0, "3\n"), r.stderr


def test_q_without_a_store_says_where_it_looked_and_creates_nothing(tmp_path: Path) -> None:
    r = _nanoslack_q(COUNT, cwd=tmp_path)
    assert r.returncode == 2
    assert "data/nanoslack.db does not exist (nothing created)" in r.stderr
    assert not (tmp_path / "data").exists()


def test_q_runs_on_postgresql(pg_url: str, tmp_path: Path) -> None:
    from nanoslack.store import Store

    with Store.open(pg_url) as store:
        store.groups.ensure_public_room("slack:C0PGROOM", "dana")
    r = _nanoslack_q(
        "SELECT instance, platform_id FROM messaging_groups WHERE platform_id LIKE '%PGROOM'",
        "--header",
        cwd=tmp_path,
        env={"DATABASE_URL": pg_url},
    )
    assert (r.returncode, r.stdout) == (0, "instance|platform_id\ndana|slack:C0PGROOM\n"), r.stderr
    update = "UPDATE messaging_groups SET unknown_sender_policy = 'strict' WHERE instance = 'dana'"
    r = _nanoslack_q(update, "--db", pg_url, cwd=tmp_path)
    assert (r.returncode, r.stdout) == (0, "1\n"), r.stderr
    r = _nanoslack_q("SELEC 1", "--db", pg_url, cwd=tmp_path)
    assert r.returncode == 1 and r.stderr.startswith("q: syntax error"), r.stderr
