"""An owner's Home is published again when what it shows changes, at most once per interval
per person, the last change always published (docs/agent-surface.md): the publisher's clock
is injected, so the window is crossed without sleeping. Real store, real slack-sdk client,
the emulator's ``views.publish``."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from nanoslack.asks import OwnerAsks
from nanoslack.emulator import Emulator
from nanoslack.halts import Halts
from nanoslack.home import HomeSource
from nanoslack.logs import configure_logging
from nanoslack.slack.home import Coalescer, HomePublisher
from nanoslack.store import Store, sqlite_url

INTERVAL = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def setup(
    emu: Emulator, tmp_path: Path
) -> AsyncIterator[tuple[Emulator, Store, HomePublisher, str, str]]:
    alice, bob = emu.add_user("alice").id, emu.add_user("bob").id
    app = emu.add_app("dana")
    store = Store.open(sqlite_url(str(tmp_path / "fleet.db")))
    asks = OwnerAsks(store, instance="dana", owners=[alice, bob])
    source = HomeSource(store, asks, Halts(store), teammates_dir=tmp_path)
    client = AsyncWebClient(token=app.bot_token, base_url=emu.api_url)
    publisher = HomePublisher(source, client, bot_user_id=app.bot_user_id, interval=INTERVAL, clock=Clock())
    yield emu, store, publisher, alice, bob
    store.close()


def _publishes(emu: Emulator, user: str) -> list[str]:
    """The blocks of each views.publish for the user, in order."""
    return [
        json.dumps(c.params.get("view"))
        for c in emu.api_calls
        if c.method == "views.publish" and c.params.get("user_id") == user
    ]


def _halted_shown(emu: Emulator, user: str) -> bool:
    return "halted" in json.dumps((emu.home_view("dana", user) or {}).get("blocks"))


async def test_changes_within_ten_seconds_are_published_once_when_the_window_ends_with_the_last_state(
    setup: tuple[Emulator, Store, HomePublisher, str, str],
) -> None:
    emu, store, publisher, alice, _bob = setup
    publisher.opened({"user": alice})
    await publisher.tick(0.0)
    assert len(_publishes(emu, alice)) == 1 and not _halted_shown(emu, alice)

    # Three changes within the window: halted, resumed, halted again.
    store.room_halts.halt("C0ROOM", by="cli", instance="dana")
    await publisher.tick(1.0)
    store.room_halts.resume("C0ROOM")
    await publisher.tick(4.0)
    store.room_halts.halt("C0ROOM", by="cli", instance="dana")
    await publisher.tick(9.9)
    assert len(_publishes(emu, alice)) == 1  # nothing more inside the window

    await publisher.tick(10.0)  # the window ends: the last state goes out, once
    assert len(_publishes(emu, alice)) == 2 and _halted_shown(emu, alice)
    await publisher.tick(15.0)
    await publisher.tick(30.0)
    assert len(_publishes(emu, alice)) == 2  # no change, no publish


async def test_each_owner_has_their_own_window_and_nothing_unchanged_is_published(
    setup: tuple[Emulator, Store, HomePublisher, str, str],
) -> None:
    emu, store, publisher, alice, bob = setup
    publisher.opened({"user": alice})
    await publisher.tick(0.0)
    publisher.opened({"user": bob})
    await publisher.tick(5.0)
    assert (len(_publishes(emu, alice)), len(_publishes(emu, bob))) == (1, 1)

    store.room_halts.halt("C0ROOM", by="cli", instance="dana")
    await publisher.tick(10.0)  # alice's window ended, bob's has 5 s to go
    assert (len(_publishes(emu, alice)), len(_publishes(emu, bob))) == (2, 1)
    await publisher.tick(15.0)
    assert (len(_publishes(emu, alice)), len(_publishes(emu, bob))) == (2, 2)
    # Opening the Home again with nothing changed publishes nothing.
    publisher.opened({"user": alice})
    await publisher.tick(40.0)
    assert len(_publishes(emu, alice)) == 2


def test_the_coalescer_allows_one_publish_per_interval() -> None:
    c = Coalescer(10.0)
    assert c.wait("U1", 0.0) == 0.0
    c.published("U1", 0.0)
    assert c.wait("U1", 3.0) == 7.0 and c.wait("U2", 3.0) == 0.0
    assert c.wait("U1", 10.0) == 0.0


async def test_a_slack_with_the_home_tab_off_is_one_log_line_and_no_more_publishes(
    setup: tuple[Emulator, Store, HomePublisher, str, str],
) -> None:
    emu, store, publisher, alice, bob = setup
    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    emu.fail_next("views.publish", 1, error="not_enabled")
    publisher.opened({"user": alice})
    publisher.opened({"user": bob})
    await publisher.tick(0.0)
    store.room_halts.halt("C0ROOM", by="cli", instance="dana")
    await publisher.tick(20.0)
    refused = [json.loads(line) for line in out.getvalue().splitlines() if '"home refused"' in line]
    assert [(r["instance"], r["reason"]) for r in refused] == [("dana", "not_enabled")]
    assert len([c for c in emu.api_calls if c.method == "views.publish"]) == 1
