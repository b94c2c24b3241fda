"""The playground's web server: the page, a server-sent event stream, and what the human
does (post a message, share a file: ``files.py``, click a button, 👍 / 👎 a reply), on
127.0.0.1 only, for this page only: another site's page cannot post as the human or click
Allow, and a rebinding name cannot read the stream (``nanoslack.localhttp``).

The stream starts with a snapshot of everything the page shows, then sends each
change as it happens: messages from the emulator's change hook, notes from the
fleet's outcomes, the status strip when it changes. A reconnecting page simply
receives a new snapshot. The server watches the store's ``turns`` table (silent
turns) and status a few times a second; the page itself never polls. What the crew
remembers (``/api/memories``, read only) the page reads at start and again when a
``memory`` note says a note was kept or forgotten.

Each bot's Home tab (docs/agent-surface.md): the page opens it as the human does in Slack
(``/api/home/open``: ``app_home_opened`` with ``tab: home``), shows the view the bot
published (sent with the snapshot and again each time the bot publishes it) and its
buttons' clicks go to the bot as a Home's do (``/api/home/click``). Opening a bot's DM is
opening its Messages tab (``/api/dm/open``: ``app_home_opened`` with ``tab: messages``); the
suggested prompts the bot sets on that DM are sent like its Home, and the page shows them
above the DM's composer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

from aiohttp import web

from nanoslack.emulator.state import Conversation
from nanoslack.localhttp import LocalGuard
from nanoslack.logs import get_logger
from nanoslack.playground.files import MAX_BODY_BYTES, PlaygroundFiles
from nanoslack.playground.notes import Note, NoteBook
from nanoslack.playground.stage import ROOM_LABEL, ROUND_ROOM, Stage
from nanoslack.store import NoteRow, RunRow
from nanoslack.store.routines import shadowed

log = get_logger(__name__)

STATIC = Path(__file__).resolve().parent / "static"
FAVICON = (STATIC / "favicon.svg").read_bytes()
HOST = "127.0.0.1"
WATCH_EVERY_S = 0.3
KEEPALIVE_S = 15.0
JSON = dict[str, Any]


class PlaygroundServer:
    def __init__(self, stage: Stage, notes: NoteBook) -> None:
        self.stage = stage
        self.notes = notes
        self._clients: set[asyncio.Queue[str | None]] = set()
        self._status: JSON = {}
        self._runner: web.AppRunner | None = None
        self._watcher: asyncio.Task[None] | None = None
        # Each bot's Home view as the human last saw it published (by its hash).
        self._homes: dict[str, str | None] = {}
        # The processing sessions the page was last told of (each shows its Stop button).
        self._sessions: list[JSON] = []
        # The suggested prompts on the human's bot DMs the page was last told of.
        self._prompts: dict[str, JSON] = {}
        self.url = ""

    # ---- lifecycle ---------------------------------------------------------------------------
    async def start(self, port: int = 0) -> str:
        guard = LocalGuard(HOST)
        app = web.Application(middlewares=[guard.middleware], client_max_size=MAX_BODY_BYTES)
        app.router.add_get("/", self._index)
        app.router.add_get("/favicon.ico", self._favicon)
        app.router.add_get("/events", self._events)
        app.router.add_get("/api/memories", self._memories)
        app.router.add_post("/api/post", self._post)
        app.router.add_post("/api/click", self._click)
        app.router.add_post("/api/stop", self._stop)
        app.router.add_post("/api/feedback", self._feedback)
        app.router.add_post("/api/routine", self._routine)
        app.router.add_post("/api/home/open", self._home_open)
        app.router.add_post("/api/home/click", self._home_click)
        app.router.add_post("/api/dm/open", self._dm_open)
        PlaygroundFiles(self.stage).routes(app)
        app.router.add_static("/static/", STATIC)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, HOST, port)
        await site.start()
        bound = self._runner.addresses[0][1]
        guard.bind(int(bound))
        self.url = f"http://{HOST}:{bound}/"
        self.stage.emu.engine.watchers.append(self._on_message)
        self.stage.emu.engine.status_watchers.append(self._on_status)
        self.notes.listeners.append(self._on_note)
        self._watcher = asyncio.create_task(self._watch())
        return self.url

    async def stop(self) -> None:
        if self._watcher:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        for queue in self._clients:
            queue.put_nowait(None)
        if self._runner:
            await self._runner.cleanup()

    # ---- what the page is told --------------------------------------------------------------
    def _send(self, event: JSON) -> None:
        data = json.dumps(event, separators=(",", ":"))
        for queue in self._clients:
            queue.put_nowait(data)

    def _on_message(self, channel: str, msg: JSON) -> None:
        conv = self._conversation(channel)
        if conv is not None:
            # A streamed reply grows in place until it stops: the page marks it meanwhile.
            streaming = self.stage.emu.engine.is_streaming(channel, str(msg.get("ts")))
            self._send({"type": "message", "conversation": conv, "message": {**msg, "streaming": streaming}})

    def _on_status(self, channel: str, thread_ts: str, status: str, app: str) -> None:
        """An app's status line under a thread ("" clears it; Slack also clears it when
        the app posts there, which the page sees as the app's message)."""
        if self._conversation(channel) is not None:
            self._send(
                {
                    "type": "status_line",
                    "channel": channel,
                    "thread_ts": thread_ts,
                    "status": status,
                    "app": app,
                }
            )

    def _on_note(self, note: Note) -> None:
        self._send({"type": "note", "note": note.to_json()})

    def _conversation(self, channel: str) -> JSON | None:
        """The conversation as the human's sidebar shows it; None if the human is not in it."""
        conv = next((c for c in self.stage.emu.conversations() if c.id == channel), None)
        if conv is None or self.stage.human.id not in conv.members:
            return None
        names = self.stage.user_names
        others = [names.get(m, m) for m in conv.members if m != self.stage.human.id]
        if conv.id == self.stage.room:
            label, section = ROOM_LABEL, "rooms"
        elif conv.id == self.stage.round_room:
            label, section = ROUND_ROOM, "rooms"
        elif conv.kind == "im":
            label, section = ", ".join(others), "dms"
        else:
            label, section = ", ".join(others), "rooms"
        return {"id": conv.id, "kind": conv.kind, "label": label, "section": section, "members": others}

    def snapshot(self) -> JSON:
        stage = self.stage
        convs = [c for c in (self._conversation(x.id) for x in stage.emu.conversations()) if c]
        firsts = {stage.room: 0, stage.round_room: 1}
        convs.sort(key=lambda c: (firsts.get(c["id"], 2), c["section"], c["label"]))
        return {
            "type": "snapshot",
            "me": {"id": stage.human.id, "name": stage.human.name},
            "users": [
                {"id": uid, "name": n, "bot": uid != stage.human.id} for uid, n in stage.user_names.items()
            ],
            "room": stage.room,
            "conversations": convs,
            "messages": {c["id"]: stage.emu.all_messages(c["id"]) for c in convs},
            "notes": [n.to_json() for n in self.notes.notes],
            "status": self.status(),
            "homes": self.homes(),
            "sessions": self.sessions(),
            "prompts": self.prompts(),
        }

    def sessions(self) -> list[JSON]:
        """The agent sessions processing in the human's conversations: Slack shows each
        its Stop button (docs/agent-surface.md, "Sessions and Stop")."""
        found = []
        for (channel, thread_ts), session in sorted(self.stage.emu.engine.surface.sessions.items()):
            if session.status == "processing" and self._conversation(channel) is not None:
                found.append({"channel": channel, "thread_ts": thread_ts})
        return found

    def prompts(self) -> dict[str, JSON]:
        """The suggested prompts each bot set on its DM with the human (an ``agent_view``
        app's, set without ``thread_ts``): {channel: {"prompts": [{title, message}], "title"?}}."""
        found = {}
        for conv in self.stage.emu.conversations():
            prompts = self.stage.emu.suggested_prompts(conv.id) if self._bot_of(conv) else None
            if prompts is not None:
                found[conv.id] = prompts
        return found

    def _dm_bot(self, channel: str) -> str | None:
        """The bot whose DM with the human ``channel`` is (None: not such a DM)."""
        conv = next((c for c in self.stage.emu.conversations() if c.id == channel), None)
        return self._bot_of(conv) if conv is not None else None

    def _bot_of(self, conv: Conversation) -> str | None:
        if conv.kind != "im" or self.stage.human.id not in conv.members:
            return None
        return next((n for n, a in self.stage.apps.items() if a.bot_user_id in conv.members), None)

    def homes(self) -> dict[str, JSON | None]:
        """Each bot's Home view as the human sees it (None: never published for them)."""
        human = self.stage.human.id
        return {name: self.stage.emu.home_view(name, human) for name in self.stage.apps}

    def status(self) -> JSON:
        stage = self.stage
        store = stage.fleet.store
        instances = [
            {
                "name": name,
                "connected": name in stage.fleet.instances and stage.emu.connections(app.app_id) > 0,
            }
            for name, app in stage.apps.items()
        ]
        rooms = [(stage.room, ROOM_LABEL)] + ([(stage.round_room, ROUND_ROOM)] if stage.round_room else [])
        senders = stage.sender_names
        routines = store.routines.listing()
        return {
            "instances": instances,
            "rooms": [
                {"channel": channel, "label": label, "hops": self._hops(channel), "max": stage.max_hops}
                for channel, label in rooms
            ],
            "pending": [
                {"instance": a.instance, "sender": senders.get(a.sender_id, a.sender_id)}
                for a in store.approvals.pending()
            ],
            "routines": [
                {"instance": r.instance, "name": r.name, "schedule": r.schedule, "last": r.last_status or ""}
                for r in routines
                if r.active and not shadowed(r, routines)  # a name both have is the file's
            ],
        }

    def _routine_channel(self, run: RunRow) -> str:
        """Where a routine's run shows: its room, or the owner's DM with its bot."""
        state = self.stage.fleet.store.routines.states(run.instance).get(run.routine)
        if state is not None and state.channel != "owner":
            return state.channel
        app = self.stage.apps.get(run.instance)
        for conv in self.stage.emu.conversations():
            if (
                conv.kind == "im"
                and app is not None
                and set(conv.members) == {self.stage.human.id, app.bot_user_id}
            ):
                return str(conv.id)
        return self.stage.room

    def memories(self) -> JSON:
        """Each instance's kept notes (its room notes included), oldest first."""
        memories = self.stage.fleet.store.memories
        return {
            "instances": [
                {"name": name, "notes": [self._note(n) for n in memories.all(instance=name)]}
                for name in self.stage.apps
            ]
        }

    def _note(self, note: NoteRow) -> JSON:
        channel = note.conversation.removeprefix("slack:")
        conv = self._conversation(channel) if note.scope == "room" else None
        return {
            "id": note.ref,
            "scope": note.scope,
            "room": conv["label"] if conv else channel,
            "text": note.text,
            "asked_by": self.stage.sender_names.get(note.asked_by, note.asked_by),
            "at": note.created_at,
        }

    def _hops(self, room: str) -> int:
        store = self.stage.fleet.store
        # Identity scope counts per instance: the room is as far as its furthest instance.
        if self.stage.fleet.settings.hop_scope == "room":
            return store.hops.room_count(room)
        return max((c.count for c in store.hops.counts() if c.room == room), default=0)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(WATCH_EVERY_S)
            try:
                store = self.stage.fleet.store
                self.notes.on_turns(store.turns.recent(limit=50), store.steps.of)
                self.notes.on_routine_runs(store.routines.recent(limit=50), self._routine_channel)
                status = self.status()
                self._send_homes()
                self._send_sessions()
                self._send_prompts()
            except Exception as exc:  # a busy store must not end the page's updates
                log.warning("playground watch failed", error=type(exc).__name__)
                continue
            if status != self._status:
                self._status = status
                self._send({"type": "status", "status": status})

    def _send_sessions(self) -> None:
        sessions = self.sessions()
        if sessions != self._sessions:
            self._sessions = sessions
            self._send({"type": "sessions", "sessions": sessions})

    def _send_prompts(self) -> None:
        prompts = self.prompts()
        if prompts != self._prompts:
            self._prompts = prompts
            self._send({"type": "prompts", "prompts": prompts})

    def _send_homes(self) -> None:
        """A bot published the human's Home again: the page shows the new view."""
        for name, view in self.homes().items():
            stamp = view.get("hash") if view else None
            if self._homes.get(name) != stamp:
                self._homes[name] = stamp
                self._send({"type": "home", "bot": name, "view": view})

    # ---- HTTP handlers ----------------------------------------------------------------------
    async def _index(self, _req: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html")

    async def _memories(self, _req: web.Request) -> web.Response:
        return web.json_response(self.memories())

    async def _events(self, req: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(req)
        queue: asyncio.Queue[str | None] = asyncio.Queue()
        queue.put_nowait(json.dumps(self.snapshot(), separators=(",", ":")))
        self._clients.add(queue)
        try:
            while True:
                try:
                    data = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
                except TimeoutError:
                    await resp.write(b": keepalive\n\n")
                    continue
                if data is None:
                    break
                await resp.write(f"data: {data}\n\n".encode())
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._clients.discard(queue)
        return resp

    async def _post(self, req: web.Request) -> web.Response:
        body = await _json_body(req)
        channel, text = str(body.get("channel", "")), str(body.get("text", "")).strip()
        thread_ts = body.get("thread_ts") or None
        if not channel or not text:
            return web.json_response({"ok": False, "error": "channel and text are required"}, status=400)
        try:
            ts = await self.stage.post_as_human(channel, text, str(thread_ts) if thread_ts else None)
        except Exception as exc:
            return web.json_response({"ok": False, "error": str(exc)}, status=400)
        return web.json_response({"ok": True, "ts": ts})

    async def _favicon(self, _req: web.Request) -> web.Response:
        """Browsers ask for it whatever the page says: the page's own icon, not a 404."""
        return web.Response(body=FAVICON, content_type="image/svg+xml")

    async def _routine(self, req: web.Request) -> web.Response:
        """The page's ▶ button: one run of a routine now (``nanoslack routines run``)."""
        body = await _json_body(req)
        instance, name = str(body.get("instance", "")), str(body.get("name", ""))
        store = self.stage.fleet.store
        if not store.routines.request_run(instance, name):
            return web.json_response({"ok": False, "error": f"no routine {instance}/{name}"}, status=400)
        # Where its post will land, so the page opens it there: its room, or "" for the
        # owner's DM with the bot (which the run may open).
        state = store.routines.states(instance).get(name)
        channel = state.channel if state is not None and state.channel != "owner" else ""
        app = self.stage.apps.get(instance)
        return web.json_response({"ok": True, "bot": app.bot_user_id if app else "", "channel": channel})

    async def _click(self, req: web.Request) -> web.Response:
        """A button on an app's message: delivered to the app over Socket Mode, like Slack does."""
        body = await _json_body(req)
        try:
            await self.stage.emu.click_button(
                self.stage.human.id,
                str(body["channel"]),
                str(body["ts"]),
                str(body["action_id"]),
                str(body["value"]) if body.get("value") is not None else None,
            )
        except Exception as exc:
            return web.json_response({"ok": False, "error": str(exc)}, status=400)
        return web.json_response({"ok": True})

    async def _feedback(self, req: web.Request) -> web.Response:
        """👍 (``positive``) or 👎 under a reply: Slack's ``block_actions`` of its feedback buttons."""
        body = await _json_body(req)
        try:
            await self.stage.emu.click_feedback(
                self.stage.human.id,
                str(body["channel"]),
                str(body["ts"]),
                positive=bool(body.get("positive")),
            )
        except Exception as exc:
            return web.json_response({"ok": False, "error": str(exc)}, status=400)
        return web.json_response({"ok": True})

    async def _stop(self, req: web.Request) -> web.Response:
        """The Stop button of a processing session: Slack's click, ``agent_session_stopped``."""
        body = await _json_body(req)
        try:
            await self.stage.emu.click_stop(self.stage.human.id, str(body["channel"]), str(body["thread_ts"]))
        except Exception as exc:
            return web.json_response({"ok": False, "error": str(exc)}, status=400)
        return web.json_response({"ok": True})

    async def _home_open(self, req: web.Request) -> web.Response:
        """The human opens a bot's Home tab: ``app_home_opened`` to that bot."""
        bot = str((await _json_body(req)).get("bot", ""))
        if bot not in self.stage.apps:
            return web.json_response({"ok": False, "error": f"no bot {bot!r}"}, status=400)
        await self.stage.emu.open_app_home(self.stage.human.id, bot)
        return web.json_response({"ok": True, "view": self.stage.emu.home_view(bot, self.stage.human.id)})

    async def _dm_open(self, req: web.Request) -> web.Response:
        """The human opens a bot's DM, its Messages tab: ``app_home_opened`` with ``tab:
        messages`` to that bot, which sets the DM's suggested prompts (they come in the stream)."""
        channel = str((await _json_body(req)).get("channel", ""))
        bot = self._dm_bot(channel)
        if bot is None:
            log.info("dm open refused", channel=channel, reason="not the human's DM with a bot")
            return web.json_response({"ok": False, "error": f"no bot DM {channel!r}"}, status=400)
        await self.stage.emu.open_app_home(self.stage.human.id, bot, tab="messages")
        return web.json_response({"ok": True, "bot": bot})

    async def _home_click(self, req: web.Request) -> web.Response:
        """A button of a bot's Home: a ``block_actions`` from the Home view, like Slack's."""
        body = await _json_body(req)
        bot = str(body.get("bot", ""))
        if bot not in self.stage.apps:
            return web.json_response({"ok": False, "error": f"no bot {bot!r}"}, status=400)
        try:
            await self.stage.emu.click_home_button(
                self.stage.human.id,
                bot,
                str(body["action_id"]),
                str(body["value"]) if body.get("value") is not None else None,
            )
        except Exception as exc:
            return web.json_response({"ok": False, "error": str(exc)}, status=400)
        return web.json_response({"ok": True})


async def _json_body(req: web.Request) -> JSON:
    try:
        body = await req.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
