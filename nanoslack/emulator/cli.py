"""`nanoslack emulator --port P --workspace FILE`: run the emulator standalone."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys

from .driver import Emulator, apply_workspace
from .workspace import load_workspace_file, sample_workspace, team_of


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="nanoslack emulator", description="Run the local Slack emulator.")
    p.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: pick a free one)")
    p.add_argument("--workspace", help="workspace JSON file (default: the embedded sample workspace)")
    p.add_argument(
        "--ack-timeout", type=float, default=3.0, help="seconds before an unacked envelope is redelivered"
    )
    p.add_argument("--max-retries", type=int, default=3)
    p.add_argument("--no-own-posts", action="store_true", help="do not deliver an app its own posts")
    p.add_argument("--mpim-prefix", default="C", choices=["C", "G"])
    p.add_argument("--no-api-log", action="store_true", help="do not keep the Web API call log")
    p.add_argument(
        "--non-marketplace",
        action="store_true",
        help="Slack's 2025 limits for non-Marketplace apps: conversations.history/replies"
        " at most 15 messages, 1 call a minute per app",
    )
    p.add_argument("--json", action="store_true", help="print the ready line as one JSON object")
    return p


async def serve(args: argparse.Namespace) -> int:
    spec = load_workspace_file(args.workspace) if args.workspace else sample_workspace()
    team_id, team_name = team_of(spec)
    emu = Emulator(
        ack_timeout=args.ack_timeout,
        max_retries=args.max_retries,
        deliver_own_posts=not args.no_own_posts,
        mpim_prefix=args.mpim_prefix,
        team_id=team_id,
        team_name=team_name,
        log_api_calls=not args.no_api_log,
        non_marketplace=args.non_marketplace,
    )
    apply_workspace(emu, spec)
    await emu.start(args.port)
    if args.json:
        info = {
            "api_url": emu.api_url,
            "base_url": emu.base_url,
            "port": emu.port,
            "users": [{"name": u.name, "id": u.id} for u in emu.users() if not u.is_bot],
            "apps": [
                {
                    "name": a.name,
                    "app_id": a.app_id,
                    "bot_id": a.bot_id,
                    "bot_user_id": a.bot_user_id,
                    "bot_token": a.bot_token,
                    "app_token": a.app_token,
                }
                for a in emu.apps()
            ],
            "conversations": [
                {"id": c.id, "kind": c.kind, "members": c.members} for c in emu.conversations()
            ],
        }
        print(json.dumps(info), flush=True)
    else:
        print(f"Slack emulator on {emu.base_url}  api_url={emu.api_url}  (team {team_id})")
        print(f"driver API: {emu.base_url}/_emulator/")
        for u in emu.users():
            if not u.is_bot:
                print(f"user {u.name}: id={u.id}")
        for a in emu.apps():
            print(f"app {a.name}: app_id={a.app_id} bot_id={a.bot_id} bot_user_id={a.bot_user_id}")
            print(f"  SLACK_BOT_TOKEN={a.bot_token}")
            print(f"  SLACK_APP_TOKEN={a.app_token}")
        for c in emu.conversations():
            print(f"conversation {c.id} ({c.kind}): members={','.join(c.members)}")
        print("ready; Ctrl-C to stop", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await emu.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return asyncio.run(serve(args))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
