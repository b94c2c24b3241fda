"""An agent's reply made ready for Slack (docs/agents.md): pure text work, no I/O.

- ``@<instance>`` naming a sibling bot becomes a real ``<@U…>`` mention, so a
  handoff always wakes the addressee (a plain ``@eli`` is just text to Slack);
- Slack's broadcast and user-group mentions (``<!channel>``, ``<!here>``,
  ``<!everyone>``, ``<!subteam^…>``) are written as plain text unless
  ``NANOSLACK_ALLOW_BROADCAST=1``: another bot's message must not be able to make an
  agent ping a whole conversation;
- at most ``MAX_POSTS`` posts a turn;
- the text is standard Markdown, posted as ``markdown_text`` (docs/architecture.md): a
  post longer than Slack takes (12,000 characters) is split between Markdown's blocks,
  never inside a fenced code block unless that block alone is too long (then each piece
  is closed and reopened), never inside a ``<…>`` token; ``@name`` inside code stays as
  written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

MAX_POSTS = 3
# A reply is posted as ``markdown_text`` (docs/architecture.md), which Slack takes up to
# 12,000 characters; so is a reply streamed into a DM (docs/agent-surface.md).
MAX_CHARS = 12_000
STREAM_MAX_CHARS = MAX_CHARS
FENCE = "```"
# A line that opens or closes a fenced code block: up to three spaces, then ``` or ~~~.
_FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})")

# A Slack token (``<@U…>``, ``<https://…|label>``) is matched whole and kept as is, so
# an ``@name`` inside a link is never rewritten; nor is one in a bare URL path
# (``https://medium.com/@eli``) or an e-mail address. Models capitalise names.
_HANDLE = re.compile(r"(<[^<>]*>)|(?<![\w@/])@([a-z0-9_-]+)\b", re.IGNORECASE)


# Code, which Markdown shows verbatim: a fenced block (to its closing fence, or the end of
# the text) or an inline span.
_CODE = re.compile(
    r"^ {0,3}(`{3,}|~{3,})[^\n]*\n.*?(?:^ {0,3}\1[^\n]*$|\Z)|`[^`\n]+`", re.MULTILINE | re.DOTALL
)

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

    # Code is shown verbatim: a ``<@U…>`` there would be shown as such, and wake nobody.
    out: list[str] = []
    at = 0
    for code in _CODE.finditer(text):
        out += [_HANDLE.sub(replace, text[at : code.start()]), code.group(0)]
        at = code.end()
    out.append(_HANDLE.sub(replace, text[at:]))
    return "".join(out)


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
    """One post's Markdown as posts of at most ``limit`` characters, cut between blocks
    (paragraphs, lists, tables, fenced code blocks): a code block is cut only when it alone
    is longer than a post, and then each piece is closed and reopened."""
    if len(text) <= limit:
        return [text]
    chunks: list[str] = []
    current = ""
    for piece in (p for block in _blocks(text) for p in _fitted(block, limit)):
        if current and len(current) + 2 + len(piece) > limit:
            chunks.append(current)
            current = ""
        current = f"{current}\n\n{piece}" if current else piece
    if current:
        chunks.append(current)
    return [c for c in chunks if c.strip()]


def _fence_of(line: str) -> str | None:
    m = _FENCE_LINE.match(line)
    return m.group(1) if m else None


def _closes(line: str, fence: str) -> bool:
    """Whether ``line`` closes a code block opened with ``fence``: the same character, as
    many or more, nothing else."""
    closer = line.strip()
    return _fence_of(line) is not None and set(closer) == {fence[0]} and len(closer) >= len(fence)


def _blocks(text: str) -> list[str]:
    """Markdown's blocks in order: a fenced code block whole (its blank lines too), the rest
    of the text between blank lines."""
    blocks: list[str] = []
    current: list[str] = []
    fence: str | None = None
    for line in text.split("\n"):
        marker = _fence_of(line)
        if fence is not None:
            current.append(line)
            if _closes(line, fence):
                blocks.append("\n".join(current))
                current, fence = [], None
            continue
        if marker is not None or not line.strip():
            if current:
                blocks.append("\n".join(current))
            current = [line] if marker is not None else []
            fence = marker
            continue
        current.append(line)
    if current:
        blocks.append("\n".join(current))
    return [b for b in blocks if b.strip()]


def _fitted(block: str, limit: int) -> list[str]:
    """A block as it is, or, longer than a post, cut on lines (a code block's pieces each
    fenced again) and a line too long cut where ``_hard_cuts`` may."""
    if len(block) <= limit:
        return [block]
    lines = block.split("\n")
    opening = lines[0] if _fence_of(lines[0]) is not None else ""
    if not opening or len(opening) > limit // 4:
        return _packed(lines, limit, "", "")  # prose, or a fence line too long to repeat
    fence = str(_fence_of(opening))
    closed = len(lines) > 1 and _closes(lines[-1], fence)
    body = lines[1:-1] if closed else lines[1:]
    closing = lines[-1].strip() if closed else fence.strip()
    # Reopened with the fence and its language only: the rest of an info string is said once.
    lang = re.match(r"[\w+#.-]*", opening.strip()[len(fence) :])
    return _packed(body, limit, opening, closing, fence + (lang.group(0) if lang else ""))


def _packed(lines: list[str], limit: int, opening: str, closing: str, reopening: str = "") -> list[str]:
    """``lines`` packed into pieces of at most ``limit``; with ``opening``, each piece is a
    fenced block (``opening`` the first, ``reopening`` the others)."""
    wrap = max(len(opening), len(reopening)) + len(closing) + 2 if opening else 0
    room = limit - wrap
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    cuts = (cut for whole in lines for cut in ([whole] if len(whole) <= room else _hard_cuts(whole, room)))
    for line in cuts:
        if current and size + 1 + len(line) > room:
            pieces.append("\n".join(current))
            current, size = [], 0
        size += len(line) + (1 if current else 0)
        current.append(line)
    if current:
        pieces.append("\n".join(current))
    if not opening:
        return pieces
    return [f"{reopening if i else opening}\n{p}\n{closing}" for i, p in enumerate(pieces)]


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
