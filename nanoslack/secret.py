"""The wrapper that keeps a token out of every log line, repr and error message."""

from __future__ import annotations

import re

_TOKEN_PREFIX_RE = re.compile(r"^(xox[a-z]|xapp)-")


class Secret:
    """A token that cannot leak through ``repr``/``str``/f-strings/log fields.

    Only ``reveal()`` hands out the value, so every use of the real token is greppable.
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def masked(self) -> str:
        # The prefix tells an operator which kind of token is configured, never its value.
        m = _TOKEN_PREFIX_RE.match(self._value)
        return f"{m.group(1)}-***" if m else "***"

    def __repr__(self) -> str:
        return f"<secret {self.masked()}>"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("Secret", self._value))

    def __bool__(self) -> bool:
        return bool(self._value)
