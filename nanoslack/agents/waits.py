"""A turn waiting for an owner (docs/agent-surface.md, "Sessions and Stop"): where a tool
that waits for an owner's Allow says so, so the turn's session shows ``suspended``.

The turn stage sets the hook for the turn (``owner_waits``); the tool approver wraps its
wait in ``awaiting_owner()``. Outside a turn (or with no hook) nothing happens.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

# Told True when a wait for an owner begins, False when it ends.
OwnerWait = Callable[[bool], None]

_current: ContextVar[OwnerWait | None] = ContextVar("nanoslack_owner_wait", default=None)


@contextlib.contextmanager
def owner_waits(hook: OwnerWait | None) -> Iterator[None]:
    token = _current.set(hook)
    try:
        yield
    finally:
        _current.reset(token)


@contextlib.contextmanager
def awaiting_owner() -> Iterator[None]:
    hook = _current.get()
    if hook is not None:
        hook(True)
    try:
        yield
    finally:
        if hook is not None:
            hook(False)
