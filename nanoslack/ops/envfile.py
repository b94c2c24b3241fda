"""Minimal, conservative editing of a ``.env`` file.

Operators keep hand-written ``.env`` files with comments, odd spacing and secrets; a
tool that rewrites the whole file through a parser would reformat or drop what it
does not understand. So the edit is textual: the one line holding the key is
rewritten (or one line appended) and every other byte stays as it was.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

# The forms python-dotenv reads: optional ``export``, spaces around ``=``.
_LINE_RE = r"^(?P<head>[ \t]*(?:export[ \t]+)?{key}[ \t]*=[ \t]*)(?P<rest>.*?)(?P<eol>\r?\n)?$"


def _split_value(rest: str) -> tuple[str, str, str]:
    """``rest`` (everything after ``=``) → (quote, value, tail).

    ``tail`` is what follows the value: the closing quote is *not* part of it, but an
    inline ``# comment`` and surrounding spaces are, so they survive the edit.
    """
    if rest[:1] in ("'", '"'):
        quote = rest[0]
        end = rest.find(quote, 1)
        if end != -1:
            return quote, rest[1:end], rest[end + 1 :]
        # An unterminated quote: dotenv would misread it anyway; treat it as bare text.
    m = re.match(r"^(?P<value>.*?)(?P<tail>[ \t]+#.*|[ \t]*)$", rest)
    assert m is not None  # the pattern matches every string
    return "", m.group("value"), m.group("tail")


def list_items(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def append_to_list(path: Path, key: str, item: str) -> bool:
    """Add ``item`` to the comma list ``key`` in the file at ``path``.

    Creates the file or the line when absent; does nothing when ``item`` is already
    listed. Returns whether the file changed. When the key occurs more than once the
    last occurrence is edited, since that is the one python-dotenv keeps.
    """
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        raise ValueError(f"not an env key: {key!r}")
    if "," in item or not item.strip() or any(c in item for c in "\r\n\"'#"):
        raise ValueError(f"not a list item: {item!r}")

    # Edit through a symlinked .env rather than replacing the link with a plain file.
    path = Path(os.path.realpath(path))
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        _write_atomically(path, f"{key}={item}\n".encode())
        return True
    # surrogateescape round-trips bytes that are not UTF-8, so lines we do not touch
    # are written back exactly even in a file with a stray Latin-1 byte.
    text = raw.decode("utf-8", errors="surrogateescape")
    lines = text.splitlines(keepends=True)
    pattern = re.compile(_LINE_RE.format(key=re.escape(key)))

    for index in range(len(lines) - 1, -1, -1):
        m = pattern.match(lines[index])
        if m is None:
            continue
        quote, value, tail = _split_value(m.group("rest"))
        if item in list_items(value):
            return False
        core = value.rstrip()
        trailing_space = value[len(core) :]
        joined = f"{core}{item}" if core == "" or core.endswith(",") else f"{core},{item}"
        lines[index] = f"{m.group('head')}{quote}{joined}{trailing_space}{quote}{tail}{m.group('eol') or ''}"
        break
    else:
        newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
        if lines and not lines[-1].endswith(("\n", "\r")):
            lines[-1] += newline
        lines.append(f"{key}={item}{newline}")

    _write_atomically(path, "".join(lines).encode("utf-8", errors="surrogateescape"))
    return True


def _write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so a reader (the fleet re-reads ``.env`` every
    ``SLACK_A2A_CONFIG_TTL`` seconds) never sees a half-written file."""
    directory = path.parent if str(path.parent) else Path(".")
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        # A new .env will hold tokens: readable by its owner only.
        mode = 0o600
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
