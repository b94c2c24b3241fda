"""``nanoslack demo``: an A2A room on the embedded Slack emulator, in the browser.

Everything is real except Slack itself: the fleet (bolt + Socket Mode), the
guard, the A2A policy, the router, the gate, the SQLite store and the agents, which
run the ``script`` back end with the sample crew in ``teammates/`` (dana plans, eli
builds, fay reviews). By default it serves the playground (``nanoslack.playground``),
a chat page where you are alice, the bots' owner. ``--no-web`` plays a narrated run
in the terminal instead, then posts the lines you type as alice. Data lands under
``data/demo/`` and is wiped at each start unless ``--keep``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import stat
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from nanoslack import eventloop
from nanoslack.config import env_suffix, load_settings
from nanoslack.inbound import Inbound
from nanoslack.logs import configure_logging
from nanoslack.ops.envfile import write_env
from nanoslack.pipeline import Outcome
from nanoslack.slack.blocks import action_id

MAX_HOPS = 3
DEFAULT_PORT = 8787
FOLLOW_EVERY_S = 0.2
# After stdin ends: stop once nothing new happened for this long (at most SETTLE_MAX_S).
SETTLE_QUIET_S = 3.0
SETTLE_MAX_S = 60.0
# The sample crew shipped with the repository (SOUL.md, AGENTS.md, script.json each).
TEAMMATES = Path(__file__).resolve().parent.parent / "teammates"


class RoomLog:
    """Prints the room's messages (threads included) as they appear."""

    def __init__(self, emu: Any, channel: str, names: dict[str, str], out: Callable[[str], None]) -> None:
        self._emu = emu
        self._channel = channel
        self._names = names
        self._out = out
        self._seen: set[str] = set()

    def new(self, after: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
        """Print the messages not printed yet; ``after(ts)`` runs after each one."""
        fresh = [m for m in self._emu.all_messages(self._channel) if m["ts"] not in self._seen]
        fresh.sort(key=lambda m: float(m["ts"]))
        for msg in fresh:
            self._seen.add(msg["ts"])
            who = self._names.get(msg.get("user", ""), msg.get("user", "?"))
            text = msg.get("text", "")
            for uid, name in self._names.items():
                text = text.replace(f"<@{uid}>", f"@{name}")
            where = "  ↳ " if msg.get("thread_ts") not in (None, msg["ts"]) else "  "
            self._out(f"   {where}{who}: {text}")
            if after is not None:
                after(msg["ts"])
        return fresh

    async def until(self, done: Callable[[dict[str, Any]], bool], within: float = 15) -> None:
        """Print messages until one satisfies ``done``."""
        await self._emu.wait_for(lambda: any(done(m) for m in self.new()), timeout=within)

    async def settle(self) -> None:
        self.new()


class Narrator:
    def __init__(self, out: Callable[[str], None]) -> None:
        self.out = out
        self.outcomes: list[tuple[Inbound, Outcome]] = []

    def __call__(self, msg: Inbound, outcome: Outcome) -> None:
        self.outcomes.append((outcome.msg or msg, outcome))

    def about(self, ts: str) -> list[tuple[Inbound, Outcome]]:
        return [(m, o) for m, o in self.outcomes if m.ts == ts]

    def describe(self, ts: str, names: dict[str, str]) -> None:
        """One line per instance: what the guard, router and gate made of ``ts``."""
        for msg, outcome in sorted(self.about(ts), key=lambda p: p[0].instance):
            self.out(line_for(msg, outcome, names))


def line_for(msg: Inbound, outcome: Outcome, names: dict[str, str]) -> str:
    who = msg.instance
    if outcome.status == "dropped":
        return f"     {who:>4}: dropped — {outcome.reason}"
    verdict = outcome.verdict
    hop = f" (hop {msg.hop}/{msg.hop_limit})" if msg.hop else ""
    sender = names.get(msg.sender_id, msg.sender_id)
    if verdict is None:
        return f"     {who:>4}: kept as room context — {outcome.reason}{hop}"
    return f"     {who:>4}: from {sender}{hop} → {verdict.action}: {verdict.reason}"


async def _play(args: argparse.Namespace, data: Path) -> int:
    from nanoslack.emulator import Emulator, apply_workspace, sample_workspace
    from nanoslack.playground.stage import backend_note, llm_settings
    from nanoslack.slack.fleet import Fleet

    out = print
    # The same back end as the page: an LLM configured in ./.env answers instead of the script.
    llm = {} if args.script else llm_settings(Path(".env"))
    async with Emulator(ack_timeout=1.0) as emu:
        apply_workspace(emu, sample_workspace())
        alice = next(u for u in emu.users() if u.name == "alice")
        apps = {a.name: a for a in emu.apps()}
        room = emu.conversations()[0].id
        side = emu.create_conversation([alice.id, apps["dana"].bot_user_id, apps["eli"].bot_user_id]).id
        env = {
            "SLACK_API_URL": emu.api_url,
            "NANOSLACK_DB": str(data / "nanoslack.db"),
            "SLACK_INSTANCES": "dana,eli,fay",
            "SLACK_A2A_ROOMS": room,
            "SLACK_A2A_MAX_HOPS": str(MAX_HOPS),
            "SLACK_OWNER": alice.id,
            "NANOSLACK_AGENT": "script",
            "NANOSLACK_TEAMMATES": str(TEAMMATES),
            # dana leads: she may hand work to anyone, anyone may hand work to her.
            "NANOSLACK_CHIEF": "dana",
        }
        env |= llm
        for app in apps.values():
            suf = env_suffix(app.name)
            env |= {f"SLACK_BOT_TOKEN_{suf}": app.bot_token, f"SLACK_APP_TOKEN_{suf}": app.app_token}
        write_env(data / ".env", env, replace=True)
        narrator = Narrator(out)
        fleet = Fleet(load_settings(data / ".env", environ={}), on_outcome=narrator)
        # dana and fay let every room member in; eli asks alice first (request_approval).
        for name in ("dana", "fay"):
            fleet.store.groups.ensure_public_room(platform_id=f"slack:{room}", instance=name)
        names = {f"slack:{alice.id}": "alice", **{f"slack:bot:{a.bot_id}": a.name for a in apps.values()}}
        by_user = {alice.id: "alice", **{a.bot_user_id: a.name for a in apps.values()}}
        mention = {n: f"<@{a.bot_user_id}>" for n, a in apps.items()}
        room_log = RoomLog(emu, room, by_user, out)

        async def step(title: str, ts: str, expect: int) -> None:
            out(f"\n{title}")
            await emu.wait_for(lambda: len(narrator.about(ts)) >= expect, timeout=10)
            narrator.describe(ts, names)

        async def bot_says(name: str, text: str, channel: str = room) -> str:
            from slack_sdk.web.async_client import AsyncWebClient

            client = AsyncWebClient(token=apps[name].bot_token, base_url=emu.api_url)
            return str((await client.chat_postMessage(channel=channel, text=text))["ts"])

        try:
            await fleet.start()
            out(f"nanoslack demo: alice (owner) with dana, eli and fay in group DM {room}")
            agents = f"{llm['NANOSLACK_AGENT']} back end from ./.env" if llm else "script back end"
            out(f"SLACK_A2A_ROOMS={room}, SLACK_A2A_MAX_HOPS={MAX_HOPS}; agents: {agents}")
            if not args.script and (note := backend_note(Path(".env"))):
                out(f"  ./.env: {note}")
            if llm:
                # The tour waits for the script crew's exact words; a model says its own.
                out("the narrated tour needs the script crew (--script shows it): straight to the room")
                await _talk(args, emu, alice.id, room, room_log, narrator, names, by_user, out)
                return 0

            out("\n1. alice asks dana; the crew hands the work on by @mention")
            await emu.post_as_user(alice.id, room, f"{mention['dana']} what's the plan for Friday?")
            await room_log.until(lambda m: m["user"] == apps["dana"].bot_user_id)
            dm = await _wait_approval_dm(emu, alice.id)
            out(f'     hold: awaiting approval — alice got a DM from eli: "{dm["text"]}"')
            await emu.click_button(alice.id, dm["channel"], dm["ts"], action_id("approve"), dm["value"])
            out("     alice clicks Allow → dana joins eli's agent group; the held message is answered once")
            await room_log.until(lambda m: "closing" in m["text"].lower(), within=30)

            out("\n2. the loop guard: eli keeps pinging dana outside any thread")
            for i in range(MAX_HOPS + 1):
                ts = await bot_says("eli", f"{mention['dana']} follow-up {i + 1}")
                await step(f"2.{i + 1} eli: @dana follow-up {i + 1}", ts, 2)

            ts = await emu.post_as_user(alice.id, room, "thanks all, carry on")
            await step("3. alice: thanks all, carry on   (a human speaks: hop counts reset)", ts, 3)
            ts = await bot_says("eli", f"{mention['dana']} back to it")
            await step("4. eli: @dana back to it", ts, 2)

            ts = await bot_says("eli", f"{mention['dana']} psst, over here", channel=side)
            await step(f"5. eli in another group DM ({side}), not in SLACK_A2A_ROOMS", ts, 1)
            await room_log.settle()

            out("\n6. alice asks dana to hand work on privately: dana reads a skill and calls send_to_agent")
            ask = await emu.post_as_user(
                alice.id, room, f"{mention['dana']} please pass the build to eli privately"
            )
            await room_log.until(lambda m: m["user"] == apps["eli"].bot_user_id and m.get("thread_ts") == ask)
            for handoff in fleet.store.handoffs.recent(limit=1):
                pair = f"{handoff.from_instance} → {handoff.to_instance}"
                out(f"     handoff: {pair} (depth {handoff.depth}), not in Slack")
            await room_log.settle()

            out('\nmessaging groups (scripts/q.py DB "SELECT … FROM messaging_groups"):')
            for row in fleet.store.groups.list():
                policy = row.unknown_sender_policy
                out(f"     {row.instance:>4}  {row.platform_id}  {row.engage_mode}  {policy}")

            await _talk(args, emu, alice.id, room, room_log, narrator, names, by_user, out)
        finally:
            await fleet.stop()
    return 0


async def _talk(
    args: argparse.Namespace,
    emu: Any,
    alice: str,
    room: str,
    room_log: RoomLog,
    narrator: Narrator,
    names: dict[str, str],
    by_user: dict[str, str],
    out: Callable[[str], None],
) -> None:
    """Post what is typed as alice until stdin ends; with ``--serve``, keep running after."""

    async def post(text: str) -> None:
        await emu.post_as_user(alice, room, _link(text, by_user))

    out("\ntype a message to post it in the room as alice (e.g. @dana what's next?); Ctrl-D ends")
    await _converse(post, room_log, narrator, names, out)
    if args.serve:
        out(f"\nserving: Slack API {emu.api_url} — Ctrl-C to stop")
        await asyncio.Event().wait()


async def _wait_approval_dm(emu: Any, owner: str) -> dict[str, str]:
    def find() -> dict[str, str] | None:
        for conv in emu.conversations():
            if conv.kind != "im" or owner not in conv.members:
                continue
            for msg in emu.conversation_messages(conv.id):
                for block in msg.get("blocks") or []:
                    for element in block.get("elements") or []:
                        if element.get("action_id") == action_id("approve"):
                            return {
                                "channel": conv.id,
                                "ts": msg["ts"],
                                "text": msg.get("text", ""),
                                "value": element.get("value", ""),
                            }
        return None

    found: dict[str, str] = await emu.wait_for(find, timeout=10)
    return found


def _link(text: str, by_user: dict[str, str]) -> str:
    """``@dana`` → ``<@U…>``, as Slack's composer does."""
    for uid, name in by_user.items():
        text = re.sub(rf"(?<![<\w])@{re.escape(name)}\b", f"<@{uid}>", text, flags=re.IGNORECASE)
    return text


async def _stdin_lines() -> AsyncIterator[str]:
    """The lines typed on stdin, read without blocking the loop (a pipe or a terminal)."""
    fd = sys.stdin.fileno()
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)):
        # A regular file or /dev/null: reading cannot block, and epoll refuses them.
        for line in sys.stdin.read().splitlines():
            yield line
        return
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while raw := await reader.readline():
        yield raw.decode(errors="replace").rstrip("\n")


async def _converse(
    post: Callable[[str], Awaitable[None]],
    room_log: RoomLog,
    narrator: Narrator,
    names: dict[str, str],
    out: Callable[[str], None],
) -> None:
    """Post each stdin line as the human; print the room and the decisions as they come."""
    seen = len(narrator.outcomes)

    def follow() -> bool:
        """Print new messages, each followed by what the instances made of it."""
        nonlocal seen
        fresh = narrator.outcomes[seen:]
        seen = len(narrator.outcomes)

        def decisions(ts: str) -> None:
            for pair in [p for p in fresh if p[0].ts == ts]:
                fresh.remove(pair)
                out(line_for(*pair, names))

        printed = bool(room_log.new(after=decisions)) or bool(fresh)
        for msg, outcome in fresh:  # about messages printed earlier
            out(line_for(msg, outcome, names))
        return printed

    async def follow_forever() -> None:
        while True:
            follow()
            await asyncio.sleep(FOLLOW_EVERY_S)

    follower = asyncio.create_task(follow_forever())
    try:
        async for line in _stdin_lines():
            if line.strip():
                await post(line.strip())
        # stdin ended (a pipe, Ctrl-D): let the exchange it started play out, then stop.
        quiet_since = loop_time()
        deadline = quiet_since + SETTLE_MAX_S
        while loop_time() - quiet_since < SETTLE_QUIET_S and loop_time() < deadline:
            await asyncio.sleep(FOLLOW_EVERY_S)
            if follow():
                quiet_since = loop_time()
    finally:
        follower.cancel()
        follow()


def loop_time() -> float:
    return asyncio.get_running_loop().time()


async def _web(args: argparse.Namespace, data: Path) -> int:
    from nanoslack.emulator import Emulator
    from nanoslack.playground import NoteBook, PlaygroundServer, Stage, open_stage
    from nanoslack.playground.stage import MAX_HOPS as PLAYGROUND_MAX_HOPS
    from nanoslack.playground.stage import backend_note, llm_settings

    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    async with Emulator(ack_timeout=1.0) as emu:
        stage_ref: list[Stage] = []
        book = NoteBook(lambda: stage_ref[0].sender_names if stage_ref else {}, PLAYGROUND_MAX_HOPS)
        llm = {} if args.script else llm_settings(Path(".env"))
        stage = await open_stage(emu, data, on_outcome=book.on_outcome, max_hops=PLAYGROUND_MAX_HOPS, llm=llm)
        stage_ref.append(stage)
        server = PlaygroundServer(stage, book)
        try:
            url = await _listen(server, args.port)
            print(f"nanoslack demo: playground at {url}  (open it in a browser; Ctrl-C stops)", flush=True)
            print(
                f"  you are alice, owner of dana, eli and fay; A2A room {stage.room}, hop limit "
                f"{stage.max_hops}; fay asks you before answering a bot; data in {data}",
                flush=True,
            )
            agents = (
                f"{llm['NANOSLACK_AGENT']} back end from ./.env" if llm else "script back end (teammates/)"
            )
            print(f"  agents: {agents}", flush=True)
            if not args.script and (note := backend_note(Path(".env"))):
                print(f"  ./.env: {note}", flush=True)
            await stopping.wait()
        finally:
            await server.stop()
            await stage.stop()
    print("nanoslack demo: stopped", flush=True)
    return 0


async def _listen(server: Any, port: int) -> str:
    try:
        return str(await server.start(port))
    except OSError:
        if port == 0:
            raise
        print(f"nanoslack demo: port {port} is busy, picking a free one", flush=True)
        return str(await server.start(0))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="nanoslack demo", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument(
        "--no-web", action="store_true", help="narrate a run in the terminal, then post typed lines as alice"
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help="playground port on 127.0.0.1 (0: any)"
    )
    parser.add_argument("--keep", action="store_true", help="keep data/demo/ from the last run")
    parser.add_argument(
        "--script", action="store_true", help="use the script crew even when ./.env configures an LLM"
    )
    parser.add_argument("--data-dir", type=Path, default=Path("data/demo"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--serve", action="store_true", help="--no-web: keep the emulator and the fleet running afterwards"
    )
    parser.add_argument("--verbose", action="store_true", help="show the fleet's log lines too")
    args = parser.parse_args(argv)
    configure_logging("info" if args.verbose else "error", "console")
    from nanoslack.playground import fresh_data_dir

    data = fresh_data_dir(args.data_dir.resolve(), keep=args.keep)
    try:
        return eventloop.run(_play(args, data) if args.no_web else _web(args, data))
    except KeyboardInterrupt:
        return 0
    except TimeoutError as exc:
        print(f"nanoslack demo: a step did not complete: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
