"""Files as the emulator serves them to real slack-sdk clients: Slack's external upload
(slack-sdk's own ``files_upload_v2`` too), ``files.info``, the file host's
``url_private(_download)`` and who it serves, people's shares, and broken downloads."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from typing import Any

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from nanoslack.emulator import Emulator, ThreadedEmulator
from nanoslack.emulator.state import DEFAULT_SCOPES

from .listen import listening

CSV = b"name,count\nalpha,1\nbeta,2\n"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


def _get(url: str, token: str | None = None) -> tuple[int, dict[str, str], bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with _OPENER.open(urllib.request.Request(url, headers=headers), timeout=5) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def _room(temu: ThreadedEmulator) -> tuple[Any, Any, Any, str, str]:
    """ann, dana, eli, their group DM, and the ts of ann's question there."""
    ann = temu.add_user("ann")
    dana, eli = temu.add_app("dana"), temu.add_app("eli")
    room = temu.create_conversation([ann.id, dana.bot_user_id, eli.bot_user_id], kind="mpim")
    return ann, dana, eli, room.id, temu.post_as_user(ann.id, room.id, "the numbers?")


def test_files_upload_v2_posts_one_file_share_into_the_thread(temu: ThreadedEmulator) -> None:
    _ann, dana, eli, room, ts = _room(temu)
    client = WebClient(token=dana.bot_token, base_url=temu.api_url)
    with listening(temu, eli) as heard:
        done = client.files_upload_v2(
            channel=room, thread_ts=ts, initial_comment="here they are", content=CSV, filename="counts.csv"
        )
        temu.wait_for(lambda: any(e.get("subtype") == "file_share" for e in heard), timeout=5)
    file_id = done["file"]["id"]
    share = next(e for e in heard if e.get("subtype") == "file_share")
    assert share["thread_ts"] == ts and share["text"] == "here they are" and share["bot_id"] == dana.bot_id
    [f] = share["files"]
    assert (f["id"], f["name"], f["mimetype"], f["filetype"], f["size"]) == (
        file_id,
        "counts.csv",
        "text/csv",
        "csv",
        len(CSV),
    )
    replies = client.conversations_replies(channel=room, ts=ts)["messages"]
    assert [m.get("subtype") for m in replies] == [None, "file_share"]
    assert replies[1]["files"][0]["url_private_download"] == f["url_private_download"]
    status, headers, body = _get(f["url_private_download"], dana.bot_token)
    assert (status, body) == (200, CSV) and headers["Content-Type"] == "text/csv"
    assert "attachment" in headers["Content-Disposition"]
    assert _get(f["url_private"], eli.bot_token)[2] == CSV  # eli is in the room it was shared in
    calls = [c.method for c in temu.api_calls if c.method.startswith("files.")]
    assert calls == ["files.getUploadURLExternal", "files.completeUploadExternal"]


def test_an_upload_never_completed_is_shared_nowhere_and_completes_once(temu: ThreadedEmulator) -> None:
    _ann, dana, _eli, room, ts = _room(temu)
    client = WebClient(token=dana.bot_token, base_url=temu.api_url)
    got = client.files_getUploadURLExternal(filename="report.md", length=5)
    with pytest.raises(SlackApiError) as caught:  # the bytes are not there yet
        client.files_completeUploadExternal(files=[{"id": got["file_id"]}], channel_id=room, thread_ts=ts)
    assert caught.value.response["error"] == "file_not_found"
    posted = _OPENER.open(urllib.request.Request(got["upload_url"], data=b"# hi\n", method="POST"), timeout=5)
    assert posted.status == 200
    assert len(temu.all_messages(room)) == 1  # uploaded, not shared
    done = client.files_completeUploadExternal(
        files=[{"id": got["file_id"], "title": "Report"}], channel_id=room, thread_ts=ts
    )
    assert done["files"][0]["title"] == "Report"
    with pytest.raises(SlackApiError) as caught:
        client.files_completeUploadExternal(files=[{"id": got["file_id"]}], channel_id=room, thread_ts=ts)
    assert caught.value.response["error"] == "file_already_completed"
    shares = [m for m in temu.all_messages(room) if m.get("subtype") == "file_share"]
    assert len(shares) == 1 and shares[0]["thread_ts"] == ts


def test_the_file_host_serves_only_this_workspaces_bot_token_in_the_header(temu: ThreadedEmulator) -> None:
    ann, dana, eli, room, ts = _room(temu)
    outsider = temu.add_app("fay")  # not in the room
    blind = temu.add_app("gus", scopes=sorted(DEFAULT_SCOPES - {"files:read", "files:write"}))
    temu.create_conversation([ann.id, blind.bot_user_id], kind="im")
    msg = temu.share_file(ann.id, room, "shot.png", b"\x89PNG fake", thread_ts=ts)
    url = msg["files"][0]["url_private_download"]
    assert _get(url, dana.bot_token)[2] == b"\x89PNG fake"
    for token in (None, "xoxb-from-another-workspace", blind.bot_token):
        status, headers, _ = _get(url, token)
        assert status == 200 and headers["Content-Type"].startswith("text/html"), token  # the sign-in page
    status, headers, _ = _get(f"{url}?token={eli.bot_token}")  # a token in the query string
    assert headers["Content-Type"].startswith("text/html")
    assert _get(url, outsider.bot_token)[0] == 404
    temu.revoke_token(dana.bot_token)
    assert _get(url, dana.bot_token)[1]["Content-Type"].startswith("text/html")


def test_a_download_can_be_refused_gone_or_redirected_to_another_host(temu: ThreadedEmulator) -> None:
    ann, dana, _eli, room, ts = _room(temu)
    f = temu.share_file(ann.id, room, "notes.txt", "a\nb\n", thread_ts=ts)["files"][0]
    url = f["url_private_download"]
    temu.set_file_fault(f["id"], "refused")
    assert _get(url, dana.bot_token)[0] == 403
    temu.set_file_fault(f["id"], "redirect", location="http://127.0.0.1:1/elsewhere/notes.txt")
    status, headers, _ = _get(url, dana.bot_token)
    assert status == 302 and headers["Location"] == "http://127.0.0.1:1/elsewhere/notes.txt"
    temu.set_file_fault(f["id"], "gone")
    assert _get(url, dana.bot_token)[0] == 404
    with pytest.raises(SlackApiError) as caught:
        WebClient(token=dana.bot_token, base_url=temu.api_url).files_info(file=f["id"])
    assert caught.value.response["error"] == "file_deleted"
    temu.set_file_fault(f["id"], None)
    assert _get(url, dana.bot_token)[2] == b"a\nb\n"


def test_a_share_with_only_its_id_is_looked_up_with_files_info(temu: ThreadedEmulator) -> None:
    ann, dana, _eli, room, _ts = _room(temu)
    msg = temu.share_file(ann.id, room, "plan.pdf", b"%PDF-1.4", text="see this", check_file_info=True)
    assert msg["subtype"] == "file_share" and msg["text"] == "see this" and msg["user"] == ann.id
    [entry] = msg["files"]
    assert entry["file_access"] == "check_file_info" and "url_private" not in entry

    async def info() -> dict[str, Any]:
        r = await AsyncWebClient(token=dana.bot_token, base_url=temu.api_url).files_info(file=entry["id"])
        return dict(r["file"])

    full = asyncio.run(info())
    assert (full["name"], full["mimetype"], full["filetype"], full["size"]) == (
        "plan.pdf",
        "application/pdf",
        "pdf",
        8,
    )
    assert _get(full["url_private_download"], dana.bot_token)[2] == b"%PDF-1.4"


def test_file_methods_need_their_scopes(temu: ThreadedEmulator) -> None:
    ann, _dana, _eli, room, _ts = _room(temu)
    old = temu.add_app("gus", scopes=sorted(DEFAULT_SCOPES - {"files:read", "files:write"}))
    temu.create_conversation([ann.id, old.bot_user_id], kind="im")
    fid = temu.share_file(ann.id, room, "a.txt", "x")["files"][0]["id"]
    client = WebClient(token=old.bot_token, base_url=temu.api_url)
    for call, needed in (
        (lambda: client.files_getUploadURLExternal(filename="a.txt", length=1), "files:write"),
        (lambda: client.files_completeUploadExternal(files=[{"id": fid}]), "files:write"),
        (lambda: client.files_info(file=fid), "files:read"),
    ):
        with pytest.raises(SlackApiError) as caught:
            call()
        assert caught.value.response["error"] == "missing_scope" and caught.value.response["needed"] == needed


async def test_async_files_upload_v2_into_a_dm(emu: Emulator) -> None:
    ann = emu.add_user("ann")
    dana = emu.add_app("dana")
    im = emu.create_conversation([ann.id, dana.bot_user_id], kind="im")
    client = AsyncWebClient(token=dana.bot_token, base_url=emu.api_url)
    done = await client.files_upload_v2(channel=im.id, content="x,y\n1,2\n", filename="t.csv", title="Table")
    assert done["file"]["title"] == "Table"
    [share] = [m for m in emu.all_messages(im.id) if m.get("subtype") == "file_share"]
    assert share["files"][0]["id"] == done["file"]["id"] and "thread_ts" not in share
    assert emu.file_content(done["file"]["id"]) == b"x,y\n1,2\n"
    info = await client.files_info(file=done["file"]["id"])
    assert info["file"]["ims"] == [im.id] and info["file"]["is_public"] is False
