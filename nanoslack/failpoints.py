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
"""

from __future__ import annotations

import os
import signal

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
