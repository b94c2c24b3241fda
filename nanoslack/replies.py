"""An agent's reply made ready for Slack (docs/agents.md): pure text work, no I/O.

- ``@<instance>`` naming a sibling bot becomes a real ``<@U…>`` mention, so a
  handoff always wakes the addressee (a plain ``@eli`` is just text to Slack);
- Slack's broadcast and user-group mentions (``<!channel>``, ``<!here>``,
  ``<!everyone>``, ``<!subteam^…>``) are written as plain text unless
  ``NANOSLACK_ALLOW_BROADCAST=1``: another bot's message must not be able to make an
  agent ping a whole conversation;
- at most ``MAX_POSTS`` posts a turn;
- a post longer than Slack takes is split on paragraph, then line boundaries,
  never inside a ``<…>`` token, and a code fence cut in two is closed and reopened.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

MAX_POSTS = 3
# Slack recommends text of at most 4,000 characters; leave room for a reopened fence.
MAX_CHARS = 3_900
# A reply streamed into a DM (docs/agent-surface.md) is one message of at most what Slack
# takes in one stream call.
STREAM_MAX_CHARS = 12_000
FENCE = "```"

# A Slack token (``<@U…>``, ``<https://…|label>``) is matched whole and kept as is, so
# an ``@name`` inside a link is never rewritten; nor is one in a bare URL path
# (``https://medium.com/@eli``) or an e-mail address. Models capitalise names.
_HANDLE = re.compile(r"(<[^<>]*>)|(?<![\w@/])@([a-z0-9_-]+)\b", re.IGNORECASE)


# ``<!here>``, ``<!channel|channel>``, ``<!subteam^S0123ABCD|@devs>``: what pings many people.
_BROADCAST = re.compile(r"<!(channel|here|everyone|subteam\^([A-Z0-9]+))(?:\|([^>]*))?>")


def quiet_broadcasts(text: str) -> str:
    """``<!here>`` → ``@here``, ``<!subteam^S1|@devs>`` → ``@devs``: said, not pinged."""

    def plain(m: re.Match[str]) -> str:
        if m.group(2):  # a user group: its handle when Slack's label carries it
            label = (m.group(3) or "").strip()
            return label if label.startswith("@") else f"@{label or m.group(2)}"
        return f"@{m.group(1)}"

    return _BROADCAST.sub(plain, text)


def link_mentions(text: str, siblings: Mapping[str, str]) -> str:
    """``@eli`` → ``<@U0ELI>`` for each sibling (instance name → bot user id)."""
    if not siblings:
        return text

    def replace(m: re.Match[str]) -> str:
        if m.group(1):
            return m.group(0)
        user_id = siblings.get(m.group(2).lower())
        return f"<@{user_id}>" if user_id else m.group(0)

    return _HANDLE.sub(replace, text)


def prepare_posts(
    posts: Sequence[str],
    siblings: Mapping[str, str],
    *,
    max_chars: int = MAX_CHARS,
    allow_broadcast: bool = False,
) -> list[str]:
    """The messages to send for one turn, in order: quieted, linked, capped at
    ``MAX_POSTS``, split."""
    kept = [p.strip() for p in posts if p.strip()][:MAX_POSTS]
    out: list[str] = []
    for post in kept:
        post = post if allow_broadcast else quiet_broadcasts(post)
        out.extend(split_text(link_mentions(post, siblings), max_chars))
    return out


def split_text(text: str, limit: int = MAX_CHARS) -> list[str]:
    if len(text) <= limit:
        return [text]
    chunks: list[str] = []
    current = ""
    for piece in _pieces(text, limit):
        if current and len(current) + len(piece) > limit:
            chunks.append(current)
            current = ""
        current += piece
    if current:
        chunks.append(current)
    return _balance_fences([c.strip("\n") for c in chunks if c.strip()])


def _pieces(text: str, limit: int) -> list[str]:
    """Paragraphs (with their separator); a paragraph too long becomes lines, a line
    too long becomes hard cuts that avoid the inside of a ``<…>`` token."""
    out: list[str] = []
    for para in re.split(r"(?<=\n\n)", text):
        if len(para) <= limit:
            out.append(para)
            continue
        for line in para.splitlines(keepends=True):
            out.extend([line] if len(line) <= limit else _hard_cuts(line, limit))
    return out


def _hard_cuts(line: str, limit: int) -> list[str]:
    cuts: list[str] = []
    while len(line) > limit:
        at = limit
        opened, closed = line.rfind("<", 0, at), line.rfind(">", 0, at)
        if opened > closed and opened > 0:
            at = opened  # do not cut a mention or link token in half
        else:
            space = line.rfind(" ", limit // 2, at)
            at = space + 1 if space > 0 else at
        cuts.append(line[:at])
        line = line[at:]
    cuts.append(line)
    return cuts


def _balance_fences(chunks: list[str]) -> list[str]:
    """A chunk that ends inside a code block closes it; the next one reopens it."""
    out: list[str] = []
    carry = False
    for chunk in chunks:
        text = (FENCE + "\n" + chunk) if carry else chunk
        open_block = text.count(FENCE) % 2 == 1
        out.append(text + "\n" + FENCE if open_block else text)
        carry = open_block
    return out
