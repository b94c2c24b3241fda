"""The playground's API answers only its own page (docs/operations.md): while
``scripts/demo`` runs, any page the user visits could otherwise
post as alice or click Allow (a ``text/plain`` POST needs no CORS preflight), and a
DNS-rebinding name could read the stream."""

from __future__ import annotations

import json

import aiohttp
import pytest

from nanoslack.playground import Stage

EVIL = "http://evil.example"


async def _post(url: str, body: dict[str, str], **headers: str) -> tuple[int, dict[str, object]]:
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, data=json.dumps(body), headers=headers) as resp,
    ):
        return resp.status, await resp.json(content_type=None)


@pytest.mark.parametrize(
    "headers",
    [
        {"Content-Type": "text/plain", "Origin": EVIL},  # a form or no-preflight fetch from any page
        {"Content-Type": "text/plain"},
        {"Content-Type": "application/json", "Origin": EVIL},
        {"Content-Type": "application/json", "Origin": "null"},  # a sandboxed frame, a file:// page
    ],
)
async def test_another_sites_post_is_refused_and_nothing_is_posted_as_the_human(
    served: tuple[Stage, str], headers: dict[str, str]
) -> None:
    stage, url = served
    before = stage.emu.all_messages(stage.room)
    status, body = await _post(
        url + "api/post", {"channel": stage.room, "text": "@dana wire the money"}, **headers
    )
    assert status == 403 and body["ok"] is False
    assert stage.emu.all_messages(stage.room) == before


async def test_another_sites_click_is_refused(served: tuple[Stage, str]) -> None:
    stage, url = served
    click = {"channel": stage.room, "ts": "1.000001", "action_id": "nanoslack_approve", "value": "1"}
    for headers in (
        {"Content-Type": "text/plain", "Origin": EVIL},
        {"Content-Type": "application/json", "Origin": EVIL},
    ):
        status, _ = await _post(url + "api/click", click, **headers)
        assert status == 403


async def test_a_rebinding_name_cannot_read_the_page_or_the_stream(served: tuple[Stage, str]) -> None:
    _, url = served
    port = url.rstrip("/").rsplit(":", 1)[1]
    async with aiohttp.ClientSession() as http:
        for path in ("", "events", "static/app.js", "api/memories"):
            async with http.get(url + path, headers={"Host": f"evil.example:{port}"}) as resp:
                assert resp.status == 403, path
        async with http.get(url, headers={"Host": f"localhost:{port}"}) as resp:
            assert resp.status == 200  # the same server under its other loopback name


async def test_the_pages_own_json_post_is_answered(served: tuple[Stage, str]) -> None:
    stage, url = served
    own = url.rstrip("/")
    status, body = await _post(
        url + "api/post",
        {"channel": stage.room, "text": "hello"},
        **{"Content-Type": "application/json", "Origin": own},
    )
    assert status == 200 and body["ok"] is True
    assert stage.emu.all_messages(stage.room)[-1]["text"] == "hello"
