"""Suite-wide fixtures: no proxy on loopback (slack-sdk's socket client ignores
NO_PROXY, even for 127.0.0.1), global logging state restored after every test, the
Slack emulator for the tests that need one (``emu``, async, and ``temu``, the same on its
own thread; a folder's conftest overrides ``emu_options``, a test adds
``@pytest.mark.emulator(...)``), and the one ``store`` fixture, run on SQLite and on a
throwaway PostgreSQL server (docs/operations.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
import structlog

from nanoslack.emulator import Emulator, Options, ThreadedEmulator
from nanoslack.eventloop import loop_factory
from nanoslack.logs import NOISY_LOGGERS, reset_loggers
from nanoslack.store import Store
from nanoslack.testing import pg

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, LoopFactory]:
    """Every async test on the loop ``nanoslack run`` serves the fleet on (nanoslack/eventloop.py)."""
    return {"uvloop": loop_factory("uvloop")}


PROXY_KEYS = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy")


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in PROXY_KEYS:
        monkeypatch.delenv(key, raising=False)


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """``configure_logging`` (the fleet, the CLI, tests capturing output) changes
    process-wide state: structlog's config, the root handlers and levels, library
    levels. Put it back, or a later test sees another test's stream and level."""
    config = structlog.get_config()
    saved = {k: (list(v) if isinstance(v, list) else v) for k, v in config.items()}
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    names = (*NOISY_LOGGERS, "nanoslack")
    levels = {n: logging.getLogger(n).level for n in names}
    yield
    structlog.reset_defaults()
    structlog.configure(**saved)
    reset_loggers()
    structlog.contextvars.clear_contextvars()
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, lvl in levels.items():
        logging.getLogger(name).setLevel(lvl)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "emulator(**options): this test's emu/temu options (nanoslack.emulator.Options)"
    )


@pytest.fixture
def emu_options() -> Options:
    """The options of every ``emu``/``temu`` under this folder (a conftest may override it)."""
    return {"ack_timeout": 1.0}


def _options(request: pytest.FixtureRequest, options: Options) -> Options:
    """The folder's options with the test's ``@pytest.mark.emulator(...)`` on top."""
    marker = request.node.get_closest_marker("emulator")
    return {**options, **(marker.kwargs if marker else {})}


@pytest.fixture
async def emu(request: pytest.FixtureRequest, emu_options: Options) -> AsyncIterator[Emulator]:
    async with Emulator(**_options(request, emu_options)) as emulator:
        yield emulator


@pytest.fixture
def temu(request: pytest.FixtureRequest, emu_options: Options) -> Iterator[ThreadedEmulator]:
    """The same emulator on its own thread, for synchronous tests."""
    with Emulator.in_thread(**_options(request, emu_options)) as emulator:
        yield emulator


@pytest.fixture(scope="session")
def pg_server() -> Iterator[pg.PgServer]:
    """One PostgreSQL server for the session; skipped with the reason where none can run."""
    reason = pg.skip_reason()
    if reason is not None:
        if os.environ.get("NANOSLACK_REQUIRE_PG"):  # .ci/run: these cases must run
            pytest.fail(f"PostgreSQL required (NANOSLACK_REQUIRE_PG) but unavailable: {reason}")
        pytest.skip(f"PostgreSQL: {reason}")
    bin_dir = pg.find_bin_dir()
    assert bin_dir is not None
    server = pg.PgServer(bin_dir)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: pg.PgServer) -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for one test."""
    url = pg_server.fresh_database()
    yield url
    pg_server.drop_database(url)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The database a test's store lives in: every store-backed test runs on both."""
    if request.param == "sqlite":
        return "sqlite:///" + str(tmp_path / "nanoslack.db")
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = Store.open(store_url)
    yield s
    s.close()


@pytest.fixture
def db_arg(store_url: str) -> str:
    """What an operator passes to ``--db``: a file path for SQLite, the URL otherwise."""
    return store_url.removeprefix("sqlite:///")


@pytest.fixture
def sql(store_url: str, request: pytest.FixtureRequest) -> Callable[[str], int]:
    """An operator's SQL from outside the fleet: ``q.py``'s sqlite3 connection, or
    ``psql`` on PostgreSQL. Returns the affected row count."""
    if store_url.startswith("sqlite:///"):
        path = store_url.removeprefix("sqlite:///")

        def run_sqlite(statement: str) -> int:
            conn = sqlite3.connect(path, isolation_level=None, timeout=5)
            try:
                return conn.execute(statement).rowcount
            finally:
                conn.close()

        return run_sqlite
    server: pg.PgServer = request.getfixturevalue("pg_server")

    def run_psql(statement: str) -> int:
        tag = server.psql(store_url, statement).stdout.strip().splitlines()[-1]
        return int(tag.rsplit(" ", 1)[1])  # "UPDATE 3", "INSERT 0 1", "DELETE 0"

    return run_psql
