"""The fleet's file downloads (docs/agents.md "Files") against a real local HTTP server:
the limits hold as the bytes stream, redirects keep the token on the allowed host, and
downloads at once and bytes held at once stay within their bounds."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web

from nanoslack.config.files import FileSettings
from nanoslack.inbound import FileRef
from nanoslack.secret import Secret
from nanoslack.slack.files import CHUNK, FileFetcher
from nanoslack.testing.ports import serve

TOKEN = Secret("xoxb-files-test")


@dataclass
class Host:
    url: str
    headers: list[dict[str, str]] = field(default_factory=list)
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    three_held: asyncio.Event = field(default_factory=asyncio.Event)
    one_held: asyncio.Event = field(default_factory=asyncio.Event)
    active: int = 0
    most_active: int = 0


@pytest.fixture
async def host() -> AsyncIterator[Host]:
    found = Host("")

    async def chunked(request: web.Request) -> web.StreamResponse:
        found.headers.append(dict(request.headers))
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        resp.enable_chunked_encoding()  # no Content-Length: only the stream says how big
        await resp.prepare(request)
        for _ in range(int(request.match_info["n"]) // 100):
            await resp.write(b"x" * 100)
        await resp.write_eof()
        return resp

    async def held(request: web.Request) -> web.Response:
        found.active += 1
        found.most_active = max(found.most_active, found.active)
        found.one_held.set()
        if found.active >= 3:
            found.three_held.set()
        await found.gate.wait()
        found.active -= 1
        return web.Response(body=b"y" * int(request.match_info["n"]), content_type="text/plain")

    async def hop(request: web.Request) -> web.Response:
        found.headers.append(dict(request.headers))
        raise web.HTTPFound(location="/chunked/200")

    app = web.Application()
    app.router.add_get("/chunked/{n}", chunked)
    app.router.add_get("/held/{n}", held)
    app.router.add_get("/hop", hop)
    runner, port = await serve(app, "127.0.0.1")
    found.url = f"http://127.0.0.1:{port}"
    yield found
    found.gate.set()
    await runner.cleanup()


def _fetcher(host: Host, tmp_path: Path, **settings: int | float) -> FileFetcher:
    return FileFetcher(FileSettings(folder=tmp_path / "files", **settings), api_url=f"{host.url}/api/")  # type: ignore[arg-type]


def _ref(i: int, url: str, size: int = 0) -> FileRef:
    return FileRef(f"F0TEST{i:04d}", f"f{i}.txt", "text/plain", size, url)


async def test_a_download_past_the_limit_is_stopped_as_it_streams_and_leaves_nothing(
    host: Host, tmp_path: Path
) -> None:
    fetcher = _fetcher(host, tmp_path, max_bytes=1000)
    got = await fetcher.fetch(_ref(1, f"{host.url}/chunked/50000", size=10), TOKEN, instance="dana")
    await fetcher.close()
    assert got.path is None
    assert got.failure.startswith("too big (more than 1000 B")
    assert list((tmp_path / "files").iterdir()) == []


async def test_a_redirect_on_the_same_host_is_followed_with_the_token(host: Host, tmp_path: Path) -> None:
    fetcher = _fetcher(host, tmp_path)
    got = await fetcher.fetch(_ref(2, f"{host.url}/hop"), TOKEN, instance="dana")
    await fetcher.close()
    assert got.path is not None and got.path.read_bytes() == b"x" * 200
    assert [h["Authorization"] for h in host.headers] == ["Bearer xoxb-files-test"] * 2


async def test_a_url_off_slacks_file_host_never_gets_the_token(host: Host, tmp_path: Path) -> None:
    fetcher = FileFetcher(FileSettings(folder=tmp_path / "files"), api_url="http://127.0.0.1:9/api/")
    got = await fetcher.fetch(_ref(3, f"{host.url}/chunked/100"), TOKEN, instance="dana")
    await fetcher.close()
    assert got.failure.startswith("its URL is not on Slack's file host")
    assert host.headers == []


async def test_a_slow_download_times_out_as_a_reason(host: Host, tmp_path: Path) -> None:
    fetcher = _fetcher(host, tmp_path, timeout_s=0.2)
    got = await fetcher.fetch(_ref(4, f"{host.url}/held/10"), TOKEN, instance="dana")
    await fetcher.close()
    assert got.failure == "the download timed out after 0.2 s"


async def test_downloads_at_once_and_bytes_held_at_once_stay_within_their_bounds(
    host: Host, tmp_path: Path
) -> None:
    fetcher = _fetcher(host, tmp_path, fetches=3, memory_bytes=2 * CHUNK)
    fetches = [
        asyncio.ensure_future(fetcher.fetch(_ref(i, f"{host.url}/held/300000"), TOKEN, instance="dana"))
        for i in range(12)
    ]
    async with asyncio.timeout(10):
        await host.three_held.wait()
    host.gate.set()
    got = await asyncio.gather(*fetches)
    await fetcher.close()
    assert all(g.path is not None and g.path.stat().st_size == 300000 for g in got)
    assert host.most_active == 3
    assert fetcher.counters.peak_in_flight == 3
    assert 0 < fetcher.counters.peak_held_bytes <= 2 * CHUNK
    assert fetcher.counters.held_bytes == 0


async def test_one_file_two_instances_answer_is_downloaded_once(host: Host, tmp_path: Path) -> None:
    fetcher = _fetcher(host, tmp_path)
    ref = _ref(5, f"{host.url}/chunked/300")
    first, second = await asyncio.gather(
        fetcher.fetch(ref, TOKEN, instance="dana"), fetcher.fetch(ref, TOKEN, instance="eli")
    )
    await fetcher.close()
    assert first.path == second.path
    assert len(host.headers) == 1


async def test_a_data_folder_that_cannot_take_the_file_is_a_reason_not_a_failed_turn(
    host: Host, tmp_path: Path
) -> None:
    (tmp_path / "files").write_text("a file where the folder should be")
    fetcher = _fetcher(host, tmp_path)
    got = await fetcher.fetch(_ref(6, f"{host.url}/chunked/300"), TOKEN, instance="dana")
    await fetcher.close()
    assert got.path is None and got.failure.startswith("it could not be saved here")


async def test_a_file_discarded_while_it_downloads_is_removed_once_it_lands(
    host: Host, tmp_path: Path
) -> None:
    fetcher = _fetcher(host, tmp_path)
    ref = _ref(7, f"{host.url}/held/10")
    fetching = asyncio.ensure_future(fetcher.fetch(ref, TOKEN, instance="dana"))
    async with asyncio.timeout(10):
        await host.one_held.wait()  # the download reached the server, and waits there
    # Its message was deleted as its turn was built: nothing on disk to remove yet.
    assert fetcher.discard([ref.id], instance="dana") == 0
    host.gate.set()
    got = await fetching
    await fetcher.close()
    assert got.path is not None and not got.path.exists()
    assert list((tmp_path / "files").iterdir()) == []
