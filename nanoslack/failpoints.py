"""Failpoints: named places where a test can make the process die on purpose.

``NANOSLACK_FAILPOINTS=pipeline.committed=kill@150`` makes the process SIGKILL
itself the moment the ``pipeline.committed`` point has been passed by 150
messages. Tests use it to crash at the worst moment deterministically instead of
racing a ``kill -9`` against the clock (docs/architecture.md). Unset (always, in production), a
failpoint costs one dict lookup.

Points: ``inbox.recorded`` (after the inbox commit, before the ack),
``pipeline.committed`` (after a batch's transaction commits, before anything is
logged or acknowledged downstream), ``turn.recorded`` (a turn's output and its
outbox rows committed, nothing sent yet), ``turn.stopped`` (a turn a person stopped is
recorded ``stopped`` with its ``Stopped.`` queued, nothing else done), ``outbox.posted`` (Slack accepted a
post, the outbox row is not yet marked sent), ``outbox.uploaded`` (a ``send_file``'s
bytes are up and its file id recorded, the file not yet completed: not shared), and for streamed DM replies
(``slack/streams.py``): ``stream.started`` and ``draft.started`` (Slack answered
``chat.startStream`` of a post or of a live draft, its ts not yet in the store),
``stream.appended`` and ``draft.appended`` (a piece appended to one).

A test that runs the fleet in its own process may instead hold a turn at a point until it
lets it go (``paused``): ``turn.built`` (a turn's transcript is built, its files fetched,
its turn row not yet written). Nothing is armed in production: a pause point costs one
dict lookup too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field

ENV_KEY = "NANOSLACK_FAILPOINTS"


def _parse(spec: str) -> dict[str, int]:
    points: dict[str, int] = {}
    for item in spec.split(","):
        name, _, action = item.strip().partition("=")
        kind, _, count = action.partition("@")
        if name and kind == "kill" and count.isdigit():
            points[name] = int(count)
    return points


_armed = _parse(os.environ.get(ENV_KEY, ""))
_passed: dict[str, int] = {}


def hit(name: str, n: int = 1) -> None:
    """``n`` messages passed the point ``name``."""
    if not _armed or name not in _armed:
        return
    _passed[name] = _passed.get(name, 0) + n
    if _passed[name] >= _armed[name]:
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class Pause:
    """One pause point armed by a test: ``reached`` once a task got there, which then waits
    until ``release``. It holds one task once: a second pass goes straight on."""

    reached: asyncio.Event = field(default_factory=asyncio.Event)
    go: asyncio.Event = field(default_factory=asyncio.Event)

    def release(self) -> None:
        self.go.set()


_pauses: dict[str, Pause] = {}


@contextlib.contextmanager
def paused(name: str) -> Iterator[Pause]:
    """Arm the pause point ``name`` in this process while the block runs (tests)."""
    pause = _pauses[name] = Pause()
    try:
        yield pause
    finally:
        _pauses.pop(name, None)
        pause.release()


async def pause_point(name: str) -> None:
    """Wait here while a test holds the point ``name`` (``paused``)."""
    if not _pauses:
        return
    pause = _pauses.pop(name, None)
    if pause is None:
        return
    pause.reached.set()
    await pause.go.wait()
