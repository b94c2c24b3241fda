"""Suite-wide fixtures: no proxy on loopback, global logging state restored after
every test, and the Slack emulator for the tests that need one.

tests/emulator keeps its own ``emu``/``temu`` (shorter ack timeout, its own env cleanup).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator

import pytest
import structlog

from nanoslack.emulator import Emulator, ThreadedEmulator
from nanoslack.logs import NOISY_LOGGERS

# slack-sdk's socket client ignores NO_PROXY, even for 127.0.0.1.
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
    structlog.contextvars.clear_contextvars()
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, lvl in levels.items():
        logging.getLogger(name).setLevel(lvl)


@pytest.fixture
async def emu() -> AsyncIterator[Emulator]:
    async with Emulator(ack_timeout=1.0) as emulator:
        yield emulator


@pytest.fixture
def temu() -> Iterator[ThreadedEmulator]:
    """The same emulator on its own thread, for synchronous tests."""
    with Emulator.in_thread(ack_timeout=1.0) as emulator:
        yield emulator
