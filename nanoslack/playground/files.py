"""Files in the playground (docs/playground.md): a file the human drops, pastes or picks in a
composer is shared in the conversation through the emulator, as Slack's client does (a
``file_share`` message whose ``files[]`` carries it, with the text as its comment); the page
shows the files of every message, the human's and the bots' (``send_file``), from
``/files/<id>``.

The page cannot send a bot token, so ``url_private`` is not for it: ``/files/<id>`` serves
a file's bytes only when it is shared in a conversation the human is in, and never as a page
that could run script (a sandboxing CSP; only raster images inline, anything else as a
download).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from aiohttp import web

from nanoslack.playground.stage import Stage

# What a drop may weigh (Slack takes far more; the page sends it base64 in one JSON body,
# which the server takes up to ``MAX_BODY_BYTES``).
MAX_DROP_BYTES = 10 * 1024 * 1024
MAX_BODY_BYTES = MAX_DROP_BYTES * 4 // 3 + 64 * 1024
# Shown in the page as pictures: never SVG, which is a document that can carry script.
INLINE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
# A served file is a document of its own if opened in a tab: it may run nothing.
_SANDBOX = {
    "Content-Security-Policy": "default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; sandbox",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "private, max-age=3600",
}


class PlaygroundFiles:
    def __init__(self, stage: Stage) -> None:
        self.stage = stage

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/api/file", self.share)
        app.router.add_get("/files/{file_id}", self.serve)

    async def share(self, req: web.Request) -> web.Response:
        """``{channel, thread_ts?, name, mimetype?, data (base64), text?}``: the human shares it."""
        try:
            body: Any = await req.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return _refused("a JSON object is required")
        channel, name = str(body.get("channel") or ""), str(body.get("name") or "").strip()
        if not channel or not name:
            return _refused("channel and name are required")
        try:
            content = base64.b64decode(str(body.get("data") or ""), validate=True)
        except (binascii.Error, ValueError):
            return _refused("data is not base64")
        if not content:
            return _refused(f"{name} is empty")
        if len(content) > MAX_DROP_BYTES:
            return _refused(f"{name} is {len(content)} bytes; the playground takes {MAX_DROP_BYTES} at most")
        thread_ts = str(body.get("thread_ts") or "") or None
        try:
            msg = await self.stage.emu.share_file(
                self.stage.human.id,
                channel,
                name.replace("/", "_").replace("\\", "_"),
                content,
                thread_ts=thread_ts,
                text=self.stage.link_mentions(str(body.get("text") or "").strip()),
                mimetype=str(body.get("mimetype") or "") or None,
            )
        except Exception as exc:
            return _refused(str(exc))
        return web.json_response({"ok": True, "ts": msg["ts"]})

    async def serve(self, req: web.Request) -> web.Response:
        """A file's bytes, when it is shared where the human can see it (404 otherwise)."""
        f = self.stage.emu.engine.files.files.get(req.match_info["file_id"])
        if f is None or f.content is None or f.deleted or not self._visible(f.channels):
            return web.Response(status=404, text="no such file here")
        headers = dict(_SANDBOX)
        if f.mimetype not in INLINE_TYPES:
            headers["Content-Disposition"] = f'attachment; filename="{_quoted(f.name)}"'
        return web.Response(body=f.content, content_type=_plain_type(f.mimetype), headers=headers)

    def _visible(self, channels: list[str]) -> bool:
        me = self.stage.human.id
        return any(c.id in channels and me in c.members for c in self.stage.emu.conversations())


def _refused(error: str) -> web.Response:
    return web.json_response({"ok": False, "error": error}, status=400)


def _quoted(name: str) -> str:
    return "".join(ch for ch in name if ch.isprintable() and ch not in '"\\')


def _plain_type(mimetype: str) -> str:
    """The file's type as a header may carry it (aiohttp takes no parameters there)."""
    main = mimetype.split(";", 1)[0].strip()
    return main if "/" in main else "application/octet-stream"
