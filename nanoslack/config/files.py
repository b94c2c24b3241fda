"""The keys of files in (docs/agents.md "Files"), read once at start."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nanoslack.config.values import positive_int, positive_seconds

DEFAULT_FILE_CHARS = 20_000
DEFAULT_FILE_MAX_BYTES = 20 * 1024 * 1024
DEFAULT_FILE_FETCHES = 4
# File bytes the fetcher may hold at once, whatever the number of downloads.
DEFAULT_FILE_MEMORY_BYTES = 50 * 1024 * 1024
DEFAULT_FILE_TIMEOUT_S = 30.0
# At most this many files of one message are fetched (the rest get a line saying so).
MAX_FILES_PER_MESSAGE = 8
FILES_DIRNAME = "files"


@dataclass(frozen=True)
class FileSettings:
    # NANOSLACK_FILE_CHARS: a text file's or a PDF's text shown to a turn, at most.
    chars: int = DEFAULT_FILE_CHARS
    # NANOSLACK_FILE_MAX_BYTES: a file larger than this is not downloaded.
    max_bytes: int = DEFAULT_FILE_MAX_BYTES
    # NANOSLACK_FILE_FETCHES: downloads at once, fleet-wide.
    fetches: int = DEFAULT_FILE_FETCHES
    # NANOSLACK_FILE_TIMEOUT: seconds one download may take.
    timeout_s: float = DEFAULT_FILE_TIMEOUT_S
    memory_bytes: int = DEFAULT_FILE_MEMORY_BYTES
    # Where downloads are kept by file id: ``files/`` beside the SQLite store (the data folder).
    folder: Path = field(default_factory=lambda: Path("data") / FILES_DIRNAME)


def parse_file_settings(env: Mapping[str, str], db_url: str, base: Path, log: Any) -> FileSettings:
    return FileSettings(
        chars=positive_int(env, "NANOSLACK_FILE_CHARS", DEFAULT_FILE_CHARS, log),
        max_bytes=positive_int(env, "NANOSLACK_FILE_MAX_BYTES", DEFAULT_FILE_MAX_BYTES, log),
        fetches=positive_int(env, "NANOSLACK_FILE_FETCHES", DEFAULT_FILE_FETCHES, log),
        timeout_s=positive_seconds(env, "NANOSLACK_FILE_TIMEOUT", DEFAULT_FILE_TIMEOUT_S, log),
        folder=files_folder(db_url, base),
    )


def files_folder(db_url: str, base: Path) -> Path:
    """The data folder's ``files/``: beside an SQLite store, else ``data/`` under the ``.env``'s folder."""
    prefix = "sqlite:///"
    if db_url.startswith(prefix) and db_url[len(prefix) :] not in ("", ":memory:"):
        return Path(db_url[len(prefix) :]).parent / FILES_DIRNAME
    return base / "data" / FILES_DIRNAME
