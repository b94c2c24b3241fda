from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from nanoslack.emulator import Emulator, ThreadedEmulator

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy")


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for v in PROXY_VARS:
        monkeypatch.delenv(v, raising=False)
    for v in (
        "SLACK_BOT_TOKEN",
        "SLACK_APP_TOKEN",
        "SLACK_CLIENT_ID",
        "SLACK_CLIENT_SECRET",
        "SLACK_SIGNING_SECRET",
    ):
        monkeypatch.delenv(v, raising=False)


@pytest.fixture
async def emu() -> AsyncIterator[Emulator]:
    async with Emulator(ack_timeout=0.5) as e:
        yield e


@pytest.fixture
def temu() -> Iterator[ThreadedEmulator]:
    with Emulator.in_thread(ack_timeout=0.5) as e:
        yield e
