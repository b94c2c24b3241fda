"""Message builders and names shared by the core tests (importable, unlike conftest)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nanoslack.asks import OwnerAsks
from nanoslack.config import A2AConfig
from nanoslack.core import build_pipeline
from nanoslack.gate import Gate
from nanoslack.halts import Halts
from nanoslack.inbound import Identity, Inbound
from nanoslack.pipeline import Pipeline
from nanoslack.rounds import RoundsFeature
from nanoslack.router import Router
from nanoslack.services import Services
from nanoslack.store import Store
from tests.factories import inbound, next_ts

__all__ = [
    "BOT_USER",
    "DM",
    "INSTANCE",
    "OWNER",
    "ROOM",
    "bot_message",
    "make_gate",
    "make_pipeline",
    "make_router",
    "rounds_feature",
    "message",
    "next_ts",
    "until",
]

INSTANCE = "dana"
BOT_USER = "U0DANABOT"  # dana's bot user: what a mention of dana names
OWNER = "U0OWNER"
ROOM = "C0ROOM"
DM = "D0DM"


def message(*, mention: bool = False, instance: str = INSTANCE, channel: str = ROOM, **kw: Any) -> Inbound:
    """``tests.factories.inbound`` for dana; ``mention`` names dana's bot user."""
    return inbound(mention=BOT_USER if mention else None, instance=instance, channel=channel, **kw)


def bot_message(bot_id: str = "B0ELI", **kw: Any) -> Inbound:
    return message(bot_id=bot_id, user=kw.pop("user", "U0ELIBOT"), **kw)


def make_gate(store: Store, owners: Sequence[str] = (OWNER,)) -> Gate:
    """The gate as an instance's core builds it: asking ``owners`` through its asks."""
    return Gate(store, OwnerAsks(store, instance=INSTANCE, owners=owners))


def make_pipeline(
    store: Store,
    identity: Identity,
    *,
    a2a_config: Callable[[], A2AConfig],
    owners: Sequence[str] = (OWNER,),
    fence: Callable[[], bool] | None = None,
) -> Pipeline:
    """The pipeline as an instance's core builds it, with the parts the core would share:
    the owners' questions (asking ``owners``), the halts, and the rounds."""
    services = Services(
        store, Path("teammates"), siblings=dict, limiter=asyncio.Semaphore(1), a2a_config=a2a_config
    )
    return build_pipeline(
        identity,
        services,
        asks=OwnerAsks(store, instance=identity.instance, owners=owners),
        halts=Halts(store),
        features=[rounds_feature(store, identity.instance)],
        fence=fence,
    )


def rounds_feature(store: Store, instance: str = INSTANCE) -> RoundsFeature:
    """The rounds as an instance without a chief has them."""
    return RoundsFeature(store, instance=instance, chief=None)


def make_router(store: Store, instance: str = INSTANCE, bot_user_id: str = BOT_USER) -> Router:
    """The router as an instance's core builds it, asking the room features that decide
    engagement (the rounds, without a chief)."""
    return Router(
        store,
        instance=instance,
        bot_user_id=bot_user_id,
        features=(rounds_feature(store, instance),),
    )


def until(check: Callable[[], bool], within: float = 10) -> None:
    """Wait in this thread for ``check`` to hold; TimeoutError after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.01)
