"""The files of the messages a turn answers, as the turn is shown them (docs/agents.md "Files").

The edge downloads them (``FileSource``: the Slack edge's ``slack.files``, off the ack
path, when the turn is built); here each downloaded copy becomes a ``SeenFile``: an image
(``image/png``, ``jpeg``, ``gif``, ``webp``) goes to the model as image input; a text-like
file (``text/*``, JSON, CSV, YAML, code, logs: by mimetype or extension) and a PDF's text
are shown inline after ``[file: <name> (<size>)]``, cut to ``NANOSLACK_FILE_CHARS`` with a
line saying how much was not shown; anything else is ``[file: <name>, <type>, <size>: not
readable here]``. A file that could not be had, or does not read as what it says it is
(a lying mimetype, an empty file, text in an unknown encoding, a PDF that does not parse)
is one line saying so and why, and a log line: never a failed turn.

Pure of Slack: the reading runs in a worker thread (a PDF's parse is CPU work).
"""

from __future__ import annotations

import asyncio
import codecs
import mimetypes
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from nanoslack.agents.types import SeenFile
from nanoslack.config.files import DEFAULT_FILE_CHARS
from nanoslack.inbound import FileRef
from nanoslack.logs import get_logger

log = get_logger(__name__)

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
# What each image type's bytes start with: a file whose bytes say otherwise is not shown as one.
_IMAGE_MAGIC: dict[str, tuple[bytes, ...]] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
}
PDF_TYPE = "application/pdf"
_TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/javascript",
        "application/x-javascript",
        "application/typescript",
        "application/x-sh",
        "application/x-shellscript",
        "application/x-python",
        "application/sql",
        "application/csv",
        "application/x-ndjson",
        "application/ld+json",
        "application/x-httpd-php",
        "application/x-ruby",
        "application/x-perl",
    }
)
_TEXT_EXTENSIONS = frozenset(
    (
        "txt md markdown rst csv tsv json jsonl ndjson yaml yml toml ini cfg conf env log xml html htm css"
        " py pyi js mjs cjs ts tsx jsx go rs java kt kts scala c h cc cpp hpp cs rb php pl sh bash zsh fish"
        " ps1 sql diff patch swift m r lua dart ex exs erl hs ml clj vue svelte gradle properties tf hcl"
        " dockerfile makefile mk cmake proto graphql gql srt vtt"
    ).split()
)
# How many bytes a UTF-8 character may take: the most a text's shown part can need.
_UTF8_MAX = 4


@dataclass(frozen=True)
class Fetched:
    """One file as the edge could get it: its local copy, or why there is none."""

    ref: FileRef
    path: Path | None = None
    failure: str = ""  # why it could not be had ("" when ``path`` is set)


class FileSource(Protocol):
    """The edge's downloads (``slack.files.SlackFiles``): one ``Fetched`` per ref, in order;
    ``chars``: ``NANOSLACK_FILE_CHARS``; ``discard``: the downloads of files no stored
    message names any more (a deleted message's) go now, one still downloading once it lands."""

    @property
    def chars(self) -> int: ...

    async def fetch(self, refs: Sequence[FileRef]) -> list[Fetched]: ...

    def discard(self, file_ids: Sequence[str]) -> None: ...


async def seen_files(
    source: FileSource, refs: Sequence[FileRef], *, instance: str, chars: int = DEFAULT_FILE_CHARS
) -> list[SeenFile]:
    """Fetch ``refs`` and read each as the turn is shown it."""
    if not refs:
        return []
    fetched = await source.fetch(refs)
    return await asyncio.to_thread(lambda: [read_file(f, chars=chars, instance=instance) for f in fetched])


def human_size(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    value = float(size)
    for unit in ("KB", "MB", "GB"):
        value /= 1024
        if value < 1024 or unit == "GB":
            return f"{value:.1f} {unit}"
    return f"{size} B"


def kind_of(name: str, mimetype: str) -> str:
    """What a file says it is: ``image``, ``pdf``, ``text`` or ``other``."""
    mime = mimetype.split(";")[0].strip().lower()
    ext = Path(name).suffix.lower().lstrip(".") or name.lower()
    if mime in IMAGE_TYPES:
        return "image"
    if mime == PDF_TYPE or (not mime and ext == "pdf"):
        return "pdf"
    if mime.startswith("text/") or mime in _TEXT_TYPES or mime.endswith(("+json", "+xml")):
        return "text"
    if ext in _TEXT_EXTENSIONS:
        return "text"
    if not mime or mime == "application/octet-stream":
        guessed = mimetypes.guess_type(name)[0] or ""
        if guessed in IMAGE_TYPES:
            return "image"
        if guessed == PDF_TYPE:
            return "pdf"
    return "other"


def read_file(fetched: Fetched, *, chars: int, instance: str = "") -> SeenFile:
    """The file as the turn is shown it. Total: a file that does not read is a line (and
    a log line, ``file not shown``, with why)."""
    seen = _read(fetched, chars)
    if seen.kind == "missing":
        log.warning("file not shown", instance=instance, file=seen.id, name=seen.name, reason=seen.shown)
    return seen


def _read(fetched: Fetched, chars: int) -> SeenFile:
    ref = fetched.ref
    name = ref.name or ref.id or "unnamed"
    if fetched.path is None:
        return _unfetched(fetched, f"[file: {name}: could not be fetched: {fetched.failure}]")
    path = fetched.path
    try:
        size = path.stat().st_size
    except OSError as exc:
        return _unfetched(fetched, f"[file: {name}: its download is gone ({exc.strerror})]")
    mimetype = ref.mimetype or mimetypes.guess_type(name)[0] or "application/octet-stream"
    kind = kind_of(name, mimetype)
    seen = SeenFile(ref.id, name, mimetype, size, kind, "", str(path))
    if size == 0:
        return _bad(seen, f"[file: {name}: the file is empty]")
    try:
        if kind == "image":
            return _image(seen, path)
        if kind == "pdf":
            return _pdf(seen, path, chars)
        if kind == "text":
            return _text(seen, path, chars)
    except OSError as exc:
        return _bad(seen, f"[file: {name}: could not be read here ({exc.strerror})]")
    return _other(seen)


def _unfetched(fetched: Fetched, shown: str) -> SeenFile:
    """A file the turn has no bytes of: the line saying why, under Slack's name for it."""
    ref = fetched.ref
    return SeenFile(ref.id, ref.name or ref.id or "unnamed", ref.mimetype, ref.size, "missing", shown)


def _bad(seen: SeenFile, shown: str) -> SeenFile:
    """A file that does not read as what it says it is: one line for the agent."""
    return SeenFile(seen.id, seen.name, seen.mimetype, seen.size, "missing", shown, seen.path)


def _head(seen: SeenFile) -> str:
    return f"[file: {seen.name} ({human_size(seen.size)})]"


def _other(seen: SeenFile) -> SeenFile:
    shown = f"[file: {seen.name}, {seen.mimetype}, {human_size(seen.size)}: not readable here]"
    return SeenFile(seen.id, seen.name, seen.mimetype, seen.size, "other", shown, seen.path)


def _image(seen: SeenFile, path: Path) -> SeenFile:
    with path.open("rb") as f:
        head = f.read(16)
    mime = seen.mimetype.split(";")[0].strip().lower()
    magic = _IMAGE_MAGIC.get(mime) or _IMAGE_MAGIC.get(mimetypes.guess_type(seen.name)[0] or "", ())
    actual = next((m for m, sigs in _IMAGE_MAGIC.items() if head.startswith(sigs)), None)
    if mime == "image/webp" and head[8:12] != b"WEBP":
        actual = None
    if not head.startswith(magic) or actual is None:
        return _bad(
            seen, f"[file: {seen.name}: said to be {seen.mimetype}, but its bytes are not such an image]"
        )
    shown = f"{_head(seen)} an image, attached for you to look at"
    return SeenFile(seen.id, seen.name, actual, seen.size, "image", shown, seen.path)


def _text(seen: SeenFile, path: Path, chars: int) -> SeenFile:
    with path.open("rb") as f:
        raw = f.read(chars * _UTF8_MAX + _UTF8_MAX)
    if b"\x00" in raw and not raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return _bad(seen, f"[file: {seen.name}: said to be text ({seen.mimetype}), but it is binary]")
    text = _decode(raw, complete=len(raw) >= seen.size)
    if text is None:
        return _bad(seen, f"[file: {seen.name}: text in an encoding not readable here (not UTF-8 or UTF-16)]")
    shown_text = text[:chars]
    left = seen.size - len(shown_text.encode("utf-8"))
    lines = [_head(seen), shown_text]
    if len(text) > chars or len(raw) < seen.size:
        lines.append(
            f"[… {human_size(max(0, left))} of this file not shown: the first {chars:,} characters are]"
        )
    return SeenFile(seen.id, seen.name, seen.mimetype, seen.size, "text", "\n".join(lines), seen.path)


def _decode(raw: bytes, *, complete: bool) -> str | None:
    """UTF-8 (a BOM dropped) or UTF-16 with a BOM; None for anything else. A read cut inside
    a character loses that character only."""
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    else:
        encoding = "utf-8-sig"
    decoder = codecs.getincrementaldecoder(encoding)()
    try:
        return decoder.decode(raw, final=complete)
    except UnicodeDecodeError:
        return None


def _pdf(seen: SeenFile, path: Path, chars: int) -> SeenFile:
    with path.open("rb") as f:
        head = f.read(1024)
    if b"%PDF-" not in head:
        return _bad(seen, f"[file: {seen.name}: said to be a PDF, but it is not one]")
    try:
        text, pages, read = _pdf_text(path, chars)
    except Exception as exc:  # noqa: BLE001 — pypdf raises many kinds on a broken file: each is a line
        return _bad(seen, f"[file: {seen.name}: a PDF that does not parse ({type(exc).__name__})]")
    lines = [f"[file: {seen.name} ({human_size(seen.size)}, PDF, {pages} pages)]", text[:chars]]
    if len(text) > chars or read < pages:
        lines.append(f"[… the rest of this PDF not shown: the first {chars:,} characters of its text are]")
    if not text.strip():
        lines[1] = "[no text in this PDF: it may be scanned images]"
    return SeenFile(seen.id, seen.name, seen.mimetype, seen.size, "pdf", "\n".join(lines), seen.path)


def _pdf_text(path: Path, chars: int) -> tuple[str, int, int]:
    """The text of the first pages, until ``chars`` is passed: (text, pages, pages read)."""
    from pypdf import PdfReader  # only a turn with a PDF pays for the import

    reader = PdfReader(path, strict=False)
    pages = len(reader.pages)
    parts: list[str] = []
    total = read = 0
    for page in reader.pages:
        if total > chars:
            break
        part = page.extract_text() or ""
        parts.append(part)
        total += len(part)
        read += 1
    return "\n".join(parts), pages, read
