"""Slack's text conventions, in one place: how a message names a person or a room.

Message text is the one Slack format the core cannot avoid: agents read it (a
``<@U…>`` in the transcript becomes ``@name``) and write it (a reply's ``@eli``
becomes ``<@U0ELI>``, a notice names who halted a room). Everything else Slack-shaped
(Block Kit, metadata, id shapes) is the edge's business (``nanoslack.slack``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

# ``<@U0ELI>`` or ``<@U0ELI|eli>``: a person or bot user named in the text.
MENTION_RE = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")


def user(slack_user_id: str) -> str:
    """How a message names a Slack user: ``<@U…>`` (Slack shows their name)."""
    return f"<@{slack_user_id}>"


def room(channel: str) -> str:
    """How a message links a conversation: ``<#C…>``."""
    return f"<#{channel}>"


def extract_mentions(text: str) -> tuple[str, ...]:
    """User ids of ``<@U…>`` / ``<@W…|name>`` tokens, in order, first occurrence only."""
    return tuple(dict.fromkeys(MENTION_RE.findall(text)))


def readable(text: str, name_of: Callable[[str], str | None]) -> str:
    """``<@U0ELI>`` → ``@eli`` where ``name_of`` knows the user; others stay as they are."""

    def name(m: re.Match[str]) -> str:
        found = name_of(m.group(1))
        return f"@{found}" if found else m.group(0)

    return MENTION_RE.sub(name, text)
