"""The engine on a port: aiohttp wiring of the Web API, the Socket Mode endpoint and the HTTP driver API."""

from __future__ import annotations

import base64
import json
from dataclasses import asdict
from typing import Any

from aiohttp import web

from . import webapi
from .engine import Engine
from .state import App, EmulatorError

JSON = dict[str, Any]


def _ok(obj: Any) -> web.Response:
    return web.Response(text=json.dumps(obj), content_type="application/json")


def _err(status: int, error: str) -> web.Response:
    return web.Response(
        text=json.dumps({"ok": False, "error": error}), status=status, content_type="application/json"
    )


async def _body(request: web.Request) -> JSON:
    if not request.can_read_body:
        return dict(request.query)
    try:
        data = await request.json()
    except ValueError:
        data = None
    out: JSON = dict(request.query)
    if isinstance(data, dict):
        out.update(data)
    return out


def _app_json(a: App) -> JSON:
    return {**asdict(a), "events": sorted(a.events), "scopes": sorted(a.scopes)}


def build_app(engine: Engine) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)

    async def api_handler(request: web.Request) -> web.StreamResponse:
        return await webapi.handle(engine, request)

    async def link(request: web.Request) -> web.StreamResponse:
        return await engine.hub.handle_ws(request)

    async def file_handler(request: web.Request) -> web.StreamResponse:
        return await webapi.serve_file(engine, request)

    async def upload_handler(request: web.Request) -> web.StreamResponse:
        return await webapi.receive_upload(engine, request)

    # ---- driver --------------------------------------------------------------------------
    def route(fn: Any) -> Any:
        async def wrapped(request: web.Request) -> web.StreamResponse:
            try:
                b = await _body(request)
                return _ok(await fn(b))
            except EmulatorError as e:
                return _err(400, e.error)
            except KeyError as e:
                return _err(404, f"not_found: {e.args[0] if e.args else ''}")
            except (ValueError, TypeError) as e:
                return _err(400, str(e))

        return wrapped

    async def d_workspace(b: JSON) -> JSON:
        return {
            "team_id": engine.ws.team_id,
            "team": engine.ws.team_name,
            "api_url": engine.api_url,
            "users": [asdict(u) for u in engine.users()],
            "apps": [_app_json(a) for a in engine.apps()],
            "conversations": [asdict(c) for c in engine.conversations()],
        }

    async def d_add_user(b: JSON) -> JSON:
        return asdict(engine.ws.add_user(b["name"], real_name=b.get("real_name"), id=b.get("id")))

    async def d_add_app(b: JSON) -> JSON:
        kw = {
            k: b[k]
            for k in ("app_id", "bot_id", "bot_user_id", "bot_token", "app_token", "events", "scopes")
            if k in b
        }
        a = engine.ws.add_app(b["name"], **kw)
        return _app_json(a)

    async def d_conv(b: JSON) -> JSON:
        return asdict(
            engine.ws.create_conversation(
                list(b["members"]), kind=b.get("kind", "mpim"), name=b.get("name"), id=b.get("id")
            )
        )

    async def d_post(b: JSON) -> JSON:
        ts = await engine.post_as_user(b["user_id"], b["channel"], b["text"], b.get("thread_ts"))
        return {"ts": ts}

    async def d_share_file(b: JSON) -> JSON:
        content = base64.b64decode(b["content_b64"]) if "content_b64" in b else str(b.get("content", ""))
        return await engine.share_file(
            b["user_id"],
            b["channel"],
            b["name"],
            content,
            thread_ts=b.get("thread_ts"),
            text=b.get("text", ""),
            mimetype=b.get("mimetype"),
            title=b.get("title"),
            check_file_info=bool(b.get("check_file_info", False)),
            fault=b.get("fault"),
            location=b.get("location"),
        )

    async def d_file_fault(b: JSON) -> JSON:
        engine.set_file_fault(b["file_id"], b.get("fault"), b.get("location"))
        return {"ok": True}

    async def d_edit(b: JSON) -> JSON:
        return await engine.edit_as_user(b["user_id"], b["channel"], b["ts"], b["text"])

    async def d_delete(b: JSON) -> JSON:
        await engine.delete_as_user(b["user_id"], b["channel"], b["ts"])
        return {"ok": True}

    async def d_bulk(b: JSON) -> JSON:
        texts = b.get("texts")
        if texts is None:
            n = int(b["count"])
            prefix = str(b.get("text", "message"))
            texts = [f"{prefix} {i}" for i in range(n)]
        tss = await engine.bulk_post(
            b["user_id"],
            b["channel"],
            list(texts),
            file_every=int(b.get("file_every", 0)),
            file_bytes=int(b.get("file_bytes", 0)),
        )
        return {"count": len(tss), "first_ts": tss[0] if tss else None, "last_ts": tss[-1] if tss else None}

    async def d_messages(b: JSON) -> Any:
        if str(b.get("flat", "")).lower() in ("1", "true"):
            return engine.all_messages(b["channel"])
        return engine.conversation_messages(b["channel"])

    async def d_api_calls(b: JSON) -> Any:
        calls = engine.api_calls
        if "method" in b:
            calls = [c for c in calls if c.method == b["method"]]
        return [asdict(c) for c in calls]

    async def d_fail_next(b: JSON) -> JSON:
        engine.fail_next(
            b["method"],
            int(b.get("n", 1)),
            b.get("error", "ratelimited"),
            int(b.get("retry_after", 1)),
            b.get("app_id"),
        )
        return {"ok": True}

    async def d_non_marketplace(b: JSON) -> JSON:
        on = b.get("on", True)
        engine.set_non_marketplace(on if isinstance(on, bool) else str(on).lower() in ("1", "true"))
        return {"non_marketplace": engine.non_marketplace}

    async def d_drop(b: JSON) -> JSON:
        return {"dropped": await engine.drop_sockets(b["app_id"])}

    async def d_disconnect(b: JSON) -> JSON:
        return {"sent": await engine.send_disconnect(b["app_id"], b.get("reason", "refresh_requested"))}

    async def d_clear_faults(b: JSON) -> JSON:
        engine.clear_faults(b.get("method"))
        return {"ok": True}

    async def d_revoke(b: JSON) -> JSON:
        engine.revoke_token(b["token"])
        return {"ok": True}

    async def d_withhold(b: JSON) -> JSON:
        n = b.get("n")
        engine.withhold_acks(b["app_id"], None if n is None else int(n))
        return {"ok": True}

    async def d_stats(b: JSON) -> JSON:
        return asdict(engine.stats(b.get("app_id")))

    async def d_connections(b: JSON) -> JSON:
        return {"connections": engine.connections(b["app_id"])}

    async def d_ack_latencies(b: JSON) -> JSON:
        clear = str(b.get("clear", "")).lower() in ("1", "true")
        return {"latencies": engine.ack_latencies(b.get("app_id"), clear)}

    async def d_click(b: JSON) -> JSON:
        return await engine.click_button(
            b["user_id"], b["channel"], b["message_ts"], b["action_id"], b.get("value")
        )

    async def d_react(b: JSON) -> JSON:
        await engine.react(b["user_id"], b["channel"], b["ts"], b["reaction"])
        return {"ok": True}

    async def d_stop(b: JSON) -> JSON:
        return await engine.click_stop(b["user_id"], b["channel"], b["thread_ts"])

    async def d_session(b: JSON) -> JSON:
        return {"session": engine.session(b["channel"], b["thread_ts"])}

    async def d_home(b: JSON) -> JSON:
        return {"view": engine.home_view(b["app_id"], b["user_id"])}

    async def d_open_home(b: JSON) -> JSON:
        return await engine.open_app_home(b["user_id"], b["app_id"], b.get("tab", "home"))

    async def d_context(b: JSON) -> JSON:
        return await engine.change_app_context(b["app_id"], b.get("channel"))

    async def d_feedback(b: JSON) -> JSON:
        positive = b.get("positive", True)
        return await engine.click_feedback(
            b["user_id"], b["channel"], b["message_ts"], positive not in (False, "0", "false")
        )

    async def d_home_click(b: JSON) -> JSON:
        return await engine.click_home_button(b["user_id"], b["app_id"], b["action_id"], b.get("value"))

    async def response_url(request: web.Request) -> web.StreamResponse:
        b = await _body(request)
        engine.response_url_posts.append({"id": request.match_info["rid"], "body": b})
        return _ok({"ok": True})

    app.router.add_route("*", "/api/{method}", api_handler)
    app.router.add_get("/link/", link)
    app.router.add_get("/link", link)
    app.router.add_get("/files-pri/{team_file}/{name}", file_handler)
    app.router.add_get("/files-pri/{team_file}/{download:download}/{name}", file_handler)
    app.router.add_post("/upload/v1/{token}", upload_handler)
    d = "/_emulator/"
    for path, fn in [
        ("workspace", d_workspace),
        ("users", d_add_user),
        ("apps", d_add_app),
        ("conversations", d_conv),
        ("post", d_post),
        ("bulk_post", d_bulk),
        ("share_file", d_share_file),
        ("file_fault", d_file_fault),
        ("edit", d_edit),
        ("delete", d_delete),
        ("messages", d_messages),
        ("api_calls", d_api_calls),
        ("fail_next", d_fail_next),
        ("non_marketplace", d_non_marketplace),
        ("drop_sockets", d_drop),
        ("disconnect", d_disconnect),
        ("withhold_acks", d_withhold),
        ("revoke_token", d_revoke),
        ("clear_faults", d_clear_faults),
        ("stats", d_stats),
        ("connections", d_connections),
        ("ack_latencies", d_ack_latencies),
        ("click", d_click),
        ("react", d_react),
        ("stop", d_stop),
        ("session", d_session),
        ("home", d_home),
        ("open_home", d_open_home),
        ("app_context", d_context),
        ("feedback", d_feedback),
        ("home_click", d_home_click),
    ]:
        app.router.add_route("*", d + path, route(fn))
    app.router.add_post(d + "response_url/{rid}", response_url)
    return app


class Server:
    """Serves one engine on 127.0.0.1 and tells it the port it got."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._runner: web.AppRunner | None = None

    async def start(self, port: int = 0) -> int:
        self._runner = web.AppRunner(build_app(self.engine), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port, backlog=512)
        await site.start()
        self.engine.port = int(self._runner.addresses[0][1])
        return self.engine.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
