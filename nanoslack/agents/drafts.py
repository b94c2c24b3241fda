"""The reply a turn is still writing (docs/agent-surface.md): where a back end shows the
text of its first post while the model produces it, so a DM can stream it.

The turn stage sets a ``Draft`` for the turn (``drafting``) when its reply may be streamed
(a DM); a back end that can see its post grow (the LLM back ends follow the
``send_message`` tool call's ``text`` argument as the model writes it; a ``command``
agent its stdout, line by line) hands the text so far to ``current()``. A draft is only
shown: what is posted is what the turn records, as always.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from contextvars import ContextVar

# The text so far of the turn's first post (each call: all of it, growing).
Draft = Callable[[str], None]

_current: ContextVar[Draft | None] = ContextVar("nanoslack_draft", default=None)


def current() -> Draft | None:
    return _current.get()


@contextlib.contextmanager
def drafting(draft: Draft | None) -> Iterator[None]:
    token = _current.set(draft)
    try:
        yield
    finally:
        _current.reset(token)


_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def partial_string_field(source: str, field: str) -> str | None:
    """The value so far of the top-level string ``field`` in ``source``, a JSON object the
    model is still writing; None while its key has not come yet. Escapes are decoded; one
    cut in half (``\\u00`` at the end, a lone high surrogate) waits for its rest."""
    reader = StringFieldReader(field)
    return reader.feed(source)


class StringFieldReader:
    """``partial_string_field`` fed piece by piece: each piece is read once (a long post
    streamed in thousands of pieces costs no more than reading it)."""

    def __init__(self, field: str) -> None:
        self._field = field
        self._source = ""
        self._at: int | None = None  # where the next character of the value is read
        self._out: list[str] = []
        self._closed = False

    def feed(self, piece: str) -> str | None:
        self._source += piece
        if self._at is None:
            self._at = _value_start(self._source, self._field)
            if self._at is None:
                return None
        if not self._closed:
            self._read()
        return "".join(self._out)

    def _read(self) -> None:
        source, i = self._source, self._at
        assert i is not None
        while i < len(source):
            ch = source[i]
            if ch == '"':
                self._closed = True
                break
            if ch != "\\":
                self._out.append(ch)
                i += 1
                continue
            if i + 1 >= len(source):
                break
            kind = source[i + 1]
            if kind != "u":
                self._out.append(_ESCAPES.get(kind, kind))
                i += 2
                continue
            code, used = _unicode_escape(source, i)
            if code is None:
                break
            self._out.append(code)
            i += used
        self._at = i


def _unicode_escape(source: str, i: int) -> tuple[str | None, int]:
    """``\\uXXXX`` at ``i`` (a surrogate pair as one character); None when cut short."""
    digits = source[i + 2 : i + 6]
    if len(digits) < 4:
        return None, 0
    code = int(digits, 16)
    if 0xD800 <= code < 0xDC00:
        low = source[i + 6 : i + 12]
        if len(low) < 6:
            return None, 0
        if low.startswith("\\u"):
            second = int(low[2:], 16)
            return chr(0x10000 + ((code - 0xD800) << 10) + (second - 0xDC00)), 12
    return chr(code), 6


def _value_start(source: str, field: str) -> int | None:
    """Where the string value of top-level ``field`` begins (after its opening quote)."""
    decoder = json.JSONDecoder()
    i, depth = 0, 0
    while i < len(source):
        ch = source[i]
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        elif ch == '"':
            try:
                key, end = decoder.raw_decode(source, i)
            except ValueError:
                return None  # a string still being written, not the key we look for
            rest = source[end:].lstrip()
            if depth == 1 and key == field and rest.startswith(":"):
                after = rest[1:].lstrip()
                if not after:
                    return None
                return len(source) - len(after) + 1 if after.startswith('"') else None
            i = end
            continue
        i += 1
    return None
