"""Minimal, conservative editing of a ``.env`` file.

Operators keep hand-written ``.env`` files with comments, odd spacing and secrets; a
tool that rewrites the whole file through a parser would reformat or drop what it
does not understand. So the edit is textual: the one line holding the key is
rewritten (or one line appended) and every other byte stays as it was.

Two edits: ``append_to_list`` adds an item to a comma list such as ``SLACK_A2A_ROOMS``
in the line's own quoting style; ``write_env`` sets whole values, quoted so that
python-dotenv reads each one back exactly (every tool and test that writes a
``.env`` goes through it).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path

# The forms python-dotenv reads: optional ``export``, spaces around ``=``.
_LINE_RE = r"^(?P<head>[ \t]*(?:export[ \t]+)?{key}[ \t]*=[ \t]*)(?P<rest>.*?)(?P<eol>\r?\n)?$"
_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# What python-dotenv reads verbatim without quotes (no space, ``#``, quote, ``$`` or ``\``).
_BARE_RE = re.compile(r"[A-Za-z0-9_./:@+,=%-]*")


def _split_value(rest: str) -> tuple[str, str, str]:
    """``rest`` (everything after ``=``) → (quote, value, tail).

    ``tail`` is what follows the value: the closing quote is *not* part of it, but an
    inline ``# comment`` and surrounding spaces are, so they survive the edit.
    """
    if rest[:1] in ("'", '"'):
        quote = rest[0]
        end = _closing_quote(rest, quote)
        if end != -1:
            return quote, rest[1:end], rest[end + 1 :]
        # An unterminated quote: dotenv would misread it anyway; treat it as bare text.
    m = re.match(r"^(?P<value>.*?)(?P<tail>[ \t]+#.*|[ \t]*)$", rest)
    assert m is not None  # the pattern matches every string
    return "", m.group("value"), m.group("tail")


def _closing_quote(rest: str, quote: str) -> int:
    """Where the value opened by ``rest[0]`` ends: python-dotenv reads ``\\<quote>``
    and ``\\\\`` inside quotes as escapes, not as the end."""
    i = 1
    while i < len(rest):
        if rest[i] == "\\" and rest[i + 1 : i + 2] in (quote, "\\"):
            i += 2
        elif rest[i] == quote:
            return i
        else:
            i += 1
    return -1


def list_items(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def append_to_list(path: Path, key: str, item: str) -> bool:
    """Add ``item`` to the comma list ``key`` in the file at ``path``.

    Creates the file or the line when absent; does nothing when ``item`` is already
    listed. Returns whether the file changed. When the key occurs more than once the
    last occurrence is edited, since that is the one python-dotenv keeps.
    """
    _check_key(key)
    if "," in item or not item.strip() or any(c in item for c in "\r\n\"'#"):
        raise ValueError(f"not a list item: {item!r}")

    # Edit through a symlinked .env rather than replacing the link with a plain file.
    path = Path(os.path.realpath(path))
    lines = _read_lines(path)
    found = _last_line(lines, key)
    if found is None:
        _append_line(lines, f"{key}={item}")
    else:
        index, m = found
        quote, value, tail = _split_value(m.group("rest"))
        if item in list_items(value):
            return False
        core = value.rstrip()
        trailing_space = value[len(core) :]
        joined = f"{core}{item}" if core == "" or core.endswith(",") else f"{core},{item}"
        lines[index] = f"{m.group('head')}{quote}{joined}{trailing_space}{quote}{tail}{m.group('eol') or ''}"
    _write_lines(path, lines)
    return True


def write_env(path: Path, values: Mapping[str, str], *, replace: bool = False) -> None:
    """Set each key of ``values`` in the ``.env`` at ``path``.

    A key's line (its last occurrence, the one python-dotenv keeps) is rewritten with
    its ``export``, spacing and inline comment kept, or a line is appended; every other
    line stays as it was. ``replace`` starts from an empty file instead: the file then
    holds exactly ``values``, in their order. A new file is readable by its owner only.
    """
    encoded = {key: _encode(key, value) for key, value in values.items()}
    path = Path(os.path.realpath(path))
    lines = [] if replace else _read_lines(path)
    for key, text in encoded.items():
        found = _last_line(lines, key)
        if found is None:
            _append_line(lines, f"{key}={text}")
            continue
        index, m = found
        _, _, tail = _split_value(m.group("rest"))
        lines[index] = f"{m.group('head')}{text}{tail}{m.group('eol') or ''}"
    _write_lines(path, lines)


def _encode(key: str, value: str) -> str:
    """``value`` as python-dotenv reads it back unchanged: bare when that is safe,
    else single-quoted with ``\\`` and ``\'`` escaped."""
    _check_key(key)
    if any(c in value for c in "\r\n\0"):
        raise ValueError(f"{key}: a value on more than one line is not written")
    if "${" in value:
        # python-dotenv expands ${VAR} even inside quotes and has no escape for it.
        raise ValueError(f"{key}: a value holding '${{' would be read back expanded")
    if _BARE_RE.fullmatch(value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _check_key(key: str) -> None:
    if not _KEY_RE.fullmatch(key):
        raise ValueError(f"not an env key: {key!r}")


def _read_lines(path: Path) -> list[str]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    # surrogateescape round-trips bytes that are not UTF-8, so lines we do not touch
    # are written back exactly even in a file with a stray Latin-1 byte.
    return raw.decode("utf-8", errors="surrogateescape").splitlines(keepends=True)


def _last_line(lines: list[str], key: str) -> tuple[int, re.Match[str]] | None:
    pattern = re.compile(_LINE_RE.format(key=re.escape(key)))
    for index in range(len(lines) - 1, -1, -1):
        m = pattern.match(lines[index])
        if m is not None:
            return index, m
    return None


def _append_line(lines: list[str], line: str) -> None:
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += newline
    lines.append(line + newline)


def _write_lines(path: Path, lines: list[str]) -> None:
    _write_atomically(path, "".join(lines).encode("utf-8", errors="surrogateescape"))


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
