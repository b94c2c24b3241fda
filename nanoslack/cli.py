"""The ``nanoslack`` command (docs/operations.md)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

USAGE = """nanoslack <command> [options]

commands:
  run         run the fleet: one Socket Mode connection per instance
  demo        run the demo against the embedded Slack emulator
  emulator    run the Slack emulator standalone
  open-room   open an A2A room (same as scripts/open-a2a-room.py)
  q           run SQL on the store (.env / --db / DATABASE_URL; same as scripts/q.py)
  turns       list recent agent turns (status, posts, tokens)
  spend       tokens and US dollars per instance, room and routine, beside their caps
  rooms       list messaging groups and A2A rooms
  hops        list current A2A hop counts
  senders     pending approvals; approve or deny a sender
  halt        halt an A2A room (no bot message, no turn) until resumed
  resume      resume a halted room
  board       print a team room's task board
  memory      list the notes agents keep; memory add, memory forget
  routines    list routines; history, run, pause or resume one
  manifest    print the Slack app manifest for an instance
  doctor      check a configuration (tokens, scopes, rooms, owners, agents, store) before a run
"""


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="nanoslack run", description="Run the fleet.")
    parser.add_argument("--env-file", type=Path, default=None, help="read this file instead of ./.env")
    args = parser.parse_args(argv)

    import os

    from nanoslack.config import ConfigError, load_settings
    from nanoslack.logs import configure_logging, get_logger

    # Configured twice: first from the environment alone, so warnings raised while
    # reading .env already go through redaction; then with the settings' values.
    configure_logging(os.environ.get("LOG_LEVEL", "info"), os.environ.get("LOG_FORMAT", "console"))
    try:
        settings = load_settings(args.env_file)
    except ConfigError as exc:
        print(f"nanoslack run: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format)
    try:
        settings.metrics_addr  # noqa: B018 - read now: a malformed value stops the run before it starts
    except ConfigError as exc:
        print(f"nanoslack run: {exc}", file=sys.stderr)
        return 2
    if not settings.instances:
        get_logger("nanoslack.cli").error(
            "no instance configured", expected="SLACK_BOT_TOKEN and/or SLACK_INSTANCES with their tokens"
        )
        return 1
    from nanoslack import eventloop
    from nanoslack.slack.fleet import Fleet

    return eventloop.run(Fleet(settings).run(), settings.event_loop)


def _lazy(module: str, attr: str = "main") -> Callable[[list[str]], int]:
    def call(argv: list[str]) -> int:
        import importlib

        fn: Callable[[list[str]], int] = getattr(importlib.import_module(module), attr)
        return int(fn(argv) or 0)

    return call


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "run": _run,
    "demo": _lazy("nanoslack.demo"),
    # The emulator is a test and demo tool; the product imports it only here, lazily.
    "emulator": _lazy("nanoslack.emulator.cli"),
    "open-room": _lazy("nanoslack.ops.open_room"),
    "q": _lazy("nanoslack.ops.q"),
    "turns": _lazy("nanoslack.ops.admin", "turns_main"),
    "spend": _lazy("nanoslack.ops.spend"),
    "rooms": _lazy("nanoslack.ops.admin", "rooms_main"),
    "hops": _lazy("nanoslack.ops.admin", "hops_main"),
    "senders": _lazy("nanoslack.ops.admin", "senders_main"),
    "halt": _lazy("nanoslack.ops.admin", "halt_main"),
    "resume": _lazy("nanoslack.ops.admin", "resume_main"),
    "board": _lazy("nanoslack.ops.admin", "board_main"),
    "memory": _lazy("nanoslack.ops.memory"),
    "routines": _lazy("nanoslack.ops.routines"),
    "manifest": _lazy("nanoslack.ops.manifest"),
    "doctor": _lazy("nanoslack.ops.doctor"),
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        print(f"nanoslack: unknown command {command!r}\n\n{USAGE}", file=sys.stderr, end="")
        return 2
    return COMMANDS[command](rest)


if __name__ == "__main__":
    raise SystemExit(main())
