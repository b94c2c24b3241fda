"""Downloading the files messages carry (docs/agents.md "Files"), for the turn that answers them.

``FileFetcher`` is the fleet's one: at most ``NANOSLACK_FILE_FETCHES`` downloads at once and
at most ``memory_bytes`` (50 MB) of file bytes held in memory at once, fleet-wide; each file
is kept under the data folder by its id (``files/<id>``), so a file two instances answer is
downloaded once, and retention removes it with the last message that names it.
``SlackFiles`` is one instance's: its bot token and its Web API client (``files.info`` for
a file shared as ``file_access: check_file_info``).

The bot token goes in the ``Authorization`` header and only to the host Slack serves files
from (``files.slack.com``) or the host of ``SLACK_API_URL`` (scheme, host and port): the
HTTP client never follows redirects itself; one to an allowed host is followed, one to any
other host is refused and the token never goes there. A file over ``NANOSLACK_FILE_MAX_BYTES``
is refused on Slack's word or stopped as it streams (never read whole first). Whatever goes
wrong is a ``Fetched`` with the reason, never an exception: the turn runs anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from nanoslack.config.files import MAX_FILES_PER_MESSAGE, FileSettings
from nanoslack.inbound import FILE_GONE, FileRef
from nanoslack.logs import get_logger
from nanoslack.secret import Secret
from nanoslack.turns.files import Fetched, human_size

log = get_logger(__name__)

SLACK_FILES_ORIGIN = ("https", "files.slack.com", 443)
CHUNK = 64 * 1024
MAX_REDIRECTS = 3
_FILE_ID = re.compile(r"[A-Z0-9]{2,64}")
_GONE = frozenset({"file_deleted", "file_not_found"})


def origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an http(s) URL; None for anything else."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or (443 if scheme == "https" else 80)


@dataclass
class FetchCounters:
    """What the fetcher did and held (the bench reads the peaks)."""

    in_flight: int = 0
    peak_in_flight: int = 0
    held_bytes: int = 0
    peak_held_bytes: int = 0
    downloaded: int = 0
    cached: int = 0
    failed: int = 0


class ByteBudget:
    """At most ``limit`` bytes held at once: a taker waits until its share fits."""

    def __init__(self, limit: int, counters: FetchCounters) -> None:
        self.limit = limit
        self._counters = counters
        self._freed = asyncio.Condition()

    async def take(self, n: int) -> None:
        n = min(n, self.limit)
        async with self._freed:
            await self._freed.wait_for(lambda: self._counters.held_bytes + n <= self.limit)
            self._counters.held_bytes += n
            self._counters.peak_held_bytes = max(self._counters.peak_held_bytes, self._counters.held_bytes)

    async def give(self, n: int) -> None:
        n = min(n, self.limit)
        async with self._freed:
            self._counters.held_bytes -= n
            self._freed.notify_all()


class Refused(Exception):
    """A download that will not be had; the message is the reason the turn is shown."""


class FileFetcher:
    """The fleet's downloads: bounded, cached by file id (see the module's doc)."""

    def __init__(self, settings: FileSettings, api_url: str) -> None:
        self.settings = settings
        self.folder = settings.folder
        allowed = {SLACK_FILES_ORIGIN}
        api = origin(api_url)
        if api is not None:
            allowed.add(api)
        self._allowed = frozenset(allowed)
        self.counters = FetchCounters()
        self._slots = asyncio.Semaphore(settings.fetches)
        self._budget = ByteBudget(settings.memory_bytes, self.counters)
        self._inflight: dict[str, asyncio.Future[Fetched]] = {}
        self._session: aiohttp.ClientSession | None = None

    def allowed(self, url: str) -> bool:
        return origin(url) in self._allowed

    def cached(self, file_id: str) -> Path | None:
        path = self._path(file_id)
        return path if path is not None and path.is_file() else None

    def _path(self, file_id: str) -> Path | None:
        return self.folder / file_id if _FILE_ID.fullmatch(file_id) else None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def fetch(self, ref: FileRef, token: Secret, *, instance: str) -> Fetched:
        """``ref``'s local copy, downloaded unless it is there already; or why not. Two
        instances answering one message share one download."""
        path = self._path(ref.id)
        if path is None:
            return Fetched(ref, failure="Slack gave no usable file id")
        if path.is_file():
            self.counters.cached += 1
            return Fetched(ref, path)
        task = self._inflight.get(ref.id)
        if task is None:
            task = asyncio.ensure_future(self._fetch(ref, path, token, instance))
            self._inflight[ref.id] = task
            task.add_done_callback(lambda _: self._inflight.pop(ref.id, None))
        # Shielded: one turn cancelled (a halt) does not cancel another's wait for the file.
        return await asyncio.shield(task)

    async def _fetch(self, ref: FileRef, path: Path, token: Secret, instance: str) -> Fetched:
        try:
            size = await self._download(ref, path, token)
        except (Refused, OSError) as exc:
            # A disk that cannot take the file is a reason too: never a failed turn.
            reason = str(exc) if isinstance(exc, Refused) else f"it could not be saved here ({exc.strerror})"
            self.counters.failed += 1
            log.warning("file not fetched", instance=instance, file=ref.id, name=ref.name, reason=reason)
            return Fetched(ref, failure=reason)
        self.counters.downloaded += 1
        log.info("file fetched", instance=instance, file=ref.id, name=ref.name, bytes=size)
        return Fetched(ref, path)

    async def _download(self, ref: FileRef, path: Path, token: Secret) -> int:
        limit = self.settings.max_bytes
        if ref.size > limit:
            raise Refused(_too_big(ref.size, limit))
        if not ref.url:
            raise Refused("Slack gave no URL to download it from")
        async with self._slots:
            counters = self.counters
            counters.in_flight += 1
            counters.peak_in_flight = max(counters.peak_in_flight, counters.in_flight)
            try:
                async with asyncio.timeout(self.settings.timeout_s):
                    return await self._get(ref, path, token)
            except TimeoutError:
                raise Refused(f"the download timed out after {self.settings.timeout_s:g} s") from None
            except aiohttp.ClientError as exc:
                raise Refused(f"the download failed ({type(exc).__name__})") from None
            finally:
                counters.in_flight -= 1

    async def _get(self, ref: FileRef, path: Path, token: Secret) -> int:
        session = self._session
        if session is None or session.closed:
            session = self._session = aiohttp.ClientSession()
        url = ref.url
        for _ in range(MAX_REDIRECTS + 1):
            if not self.allowed(url):
                raise Refused(
                    f"its URL is not on Slack's file host ({_host(url)}): the token is not sent there"
                )
            headers = {"Authorization": f"Bearer {token.reveal()}"}
            async with session.get(url, headers=headers, allow_redirects=False) as resp:
                if resp.status in (301, 302, 303, 307, 308):
                    target = urljoin(url, resp.headers.get("Location", ""))
                    if not self.allowed(target):
                        raise Refused(
                            f"Slack redirected it to another host ({_host(target)}):"
                            " not followed with the token"
                        )
                    url = target
                    continue
                _check(resp, ref)
                return await self._save(resp, path)
        raise Refused("too many redirects")

    async def _save(self, resp: aiohttp.ClientResponse, path: Path) -> int:
        """Stream the body to ``path`` (through a ``.part`` file, renamed when whole),
        stopping past the limit: never more than a chunk held per download."""
        limit = self.settings.max_bytes
        declared = resp.content_length
        if declared is not None and declared > limit:
            raise Refused(_too_big(declared, limit))
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{path.name}.{os.getpid()}.part")
        total = 0
        try:
            with part.open("wb") as out:
                while True:
                    await self._budget.take(CHUNK)
                    try:
                        chunk = await resp.content.read(CHUNK)
                        total += len(chunk)
                        if total > limit:
                            raise Refused(_too_big(total, limit, more=True))
                        out.write(chunk)
                    finally:
                        await self._budget.give(CHUNK)
                    if not chunk:
                        break
            os.replace(part, path)
            return total
        finally:
            with contextlib.suppress(FileNotFoundError):
                part.unlink()

    def discard(self, file_ids: Sequence[str], *, instance: str = "") -> int:
        """A deleted message's files (docs/agents.md, "Edits and deletes"): their downloads
        go now, whatever their age; one still downloading goes once it lands (a turn built
        as the message was deleted started it). How many copies went now."""
        removed = 0
        for file_id in file_ids:
            path = self._path(file_id)
            if path is None:
                continue
            task = self._inflight.get(file_id)
            if task is not None:
                task.add_done_callback(functools.partial(_unlink_landed, path))
            if _unlink(path):
                removed += 1
            log.info("file discarded", instance=instance, file=file_id, reason="its message was deleted")
        return removed

    def prune(self, keep: set[str], *, older_than_s: float = 600.0) -> int:
        """Remove downloads no stored message names any more (retention took their
        messages); a file written in the last ``older_than_s`` stays (a turn may be reading it)."""
        removed = 0
        cutoff = time.time() - older_than_s
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.folder):
                name = entry.name.split(".", 1)[0]
                with contextlib.suppress(OSError):
                    if name not in keep and entry.stat().st_mtime < cutoff:
                        os.unlink(entry.path)
                        removed += 1
        return removed


def _unlink_landed(path: Path, _task: asyncio.Future[Fetched]) -> None:
    _unlink(path)


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def _check(resp: aiohttp.ClientResponse, ref: FileRef) -> None:
    status = resp.status
    if status in (401, 403):
        raise Refused(f"Slack refused the download (HTTP {status})")
    if status in (404, 410):
        raise Refused(f"the file is gone (deleted, or no longer shared: HTTP {status})")
    if status != 200:
        raise Refused(f"Slack answered HTTP {status}")
    kind = (resp.content_type or "").lower()
    # Without files:read (or with a bad token) Slack answers its sign-in page, status 200.
    if kind == "text/html" and not ref.mimetype.lower().startswith("text/html"):
        raise Refused("Slack answered its sign-in page: the app may lack the files:read scope")


def _too_big(size: int, limit: int, *, more: bool = False) -> str:
    said = f"more than {human_size(limit)}" if more else human_size(size)
    return f"too big ({said}; the limit is {human_size(limit)}, NANOSLACK_FILE_MAX_BYTES)"


def _host(url: str) -> str:
    found = origin(url)
    return f"{found[1]}:{found[2]}" if found else "not an http(s) URL"


class SlackFiles:
    """One instance's downloads (``turns.files.FileSource``): its token, its client."""

    def __init__(self, fetcher: FileFetcher, client: AsyncWebClient, token: Secret, instance: str) -> None:
        self._fetcher = fetcher
        self._client = client
        self._token = token
        self.instance = instance

    @property
    def fetcher(self) -> FileFetcher:
        return self._fetcher

    @property
    def chars(self) -> int:
        return self._fetcher.settings.chars

    def discard(self, file_ids: Sequence[str]) -> None:
        self._fetcher.discard(file_ids, instance=self.instance)

    async def fetch(self, refs: Sequence[FileRef]) -> list[Fetched]:
        cap = MAX_FILES_PER_MESSAGE
        over = [
            Fetched(ref, failure=f"more than {cap} files in one message: only the first {cap} are fetched")
            for ref in refs[cap:]
        ]
        got = await asyncio.gather(*(self._one(ref) for ref in refs[:cap]))
        return [*got, *over]

    async def _one(self, ref: FileRef) -> Fetched:
        cached = self._fetcher.cached(ref.id)
        if cached is not None:
            return Fetched(ref, cached)
        if ref.access == "check_file_info":
            looked = await self._info(ref)
            if isinstance(looked, Fetched):
                return looked
            ref = looked
        return await self._fetcher.fetch(ref, self._token, instance=self.instance)

    async def _info(self, ref: FileRef) -> FileRef | Fetched:
        """``files.info`` for a file Slack shared by id only (Slack Connect)."""
        try:
            answer = await self._client.files_info(file=ref.id)
        except SlackApiError as exc:
            error = str(exc.response.get("error", "")) if exc.response is not None else ""
            reason = FILE_GONE if error in _GONE else f"files.info answered {error or 'an error'}"
            log.warning("file not fetched", instance=self.instance, file=ref.id, reason=reason)
            return Fetched(ref, failure=reason)
        except Exception as exc:  # noqa: BLE001 — the network, the SDK: each a reason, never a failed turn
            reason = f"files.info failed ({type(exc).__name__})"
            log.warning("file not fetched", instance=self.instance, file=ref.id, reason=reason)
            return Fetched(ref, failure=reason)
        file = answer.get("file")
        if not isinstance(file, dict):
            return Fetched(ref, failure="files.info answered no file")
        size = file.get("size")
        return FileRef(
            ref.id,
            str(file.get("name") or file.get("title") or ref.name),
            str(file.get("mimetype") or ""),
            size if isinstance(size, int) and size >= 0 else 0,
            str(file.get("url_private_download") or file.get("url_private") or ""),
        )
