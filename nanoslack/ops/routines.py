"""``nanoslack routines``: every routine the fleet read, and what operators do to them
(docs/routines.md). Everything goes through the store, so a fleet in another process
(or on another host, with PostgreSQL) sees a pause, a resume or a run asked for now.

- ``routines``: instance, name, source (``file``, or ``agent`` for one the agent set with
  ``schedule_routine``; "shadowed by the file" when the file has its name), schedule,
  next due, last status and reason, paused;
- ``routines history INSTANCE NAME``: its runs, newest first;
- ``routines run INSTANCE NAME``: one run now (the holder's clock claims it);
- ``routines pause|resume INSTANCE NAME``.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from nanoslack.config import ConfigError, load_settings
from nanoslack.config.values import Silent
from nanoslack.ops.admin import EXIT_ERROR, _parser, _run, table, when
from nanoslack.routines import spec
from nanoslack.store import Store
from nanoslack.store.routines import shadowed


def _file_problems(args: argparse.Namespace) -> list[str]:
    """Each problem of the configured instances' ``routines.toml`` files, with its fix: the
    fleet runs without a routine that is wrong (or without the file, when it does not parse),
    so a listing that left them out would hide them (docs/routines.md)."""
    try:
        settings = load_settings(args.env_file, log=Silent())  # run and doctor warn about values
    except ConfigError:
        return []
    lines = []
    names = (*settings.instance_names, *(n for n, _ in settings.skipped))
    for name in names:
        path = spec.routines_path(settings.teammates_dir, name)
        if not path.exists():
            continue
        loaded = spec.load(path, name, tz=settings.routine_tz(), max_steps=settings.tools.max_steps(name))
        for problem, text in zip(loaded.problems, spec.describe(loaded.problems), strict=True):
            lines.append(f"  {name}: {text} — fix: {spec.how_to_fix(problem)}")
    return lines


def _list(store: Store, args: argparse.Namespace, _env: dict[str, str], out: TextIO) -> int:
    listed = store.routines.listing()
    rows = [
        (
            r.instance,
            r.name,
            "agent (shadowed by the file)" if (hidden := shadowed(r, listed)) else r.source,
            r.schedule,
            r.channel,
            when(r.next_due) if not (r.paused or hidden) else "",
            r.last_status or "" if not hidden else "",
            r.last_reason or "" if not hidden else "",
            "yes" if r.paused else "no",
        )
        for r in listed
        if r.active
    ]
    header = ("instance", "name", "source", "schedule", "channel", "next due", "last", "reason", "paused")
    problems = _file_problems(args)
    empty = "no routines (the fleet lists them once it has read teammates/<name>/routines.toml)"
    table(out, header, rows, "no routines listed" if problems else empty)
    if not problems:
        return 0
    out.write("routines malformed (the fleet runs without what is wrong until it is fixed):\n")
    out.write("\n".join(problems) + "\n")
    return EXIT_ERROR


def _history(store: Store, args: argparse.Namespace, _env: dict[str, str], out: TextIO) -> int:
    runs = store.routines.history(args.instance, args.name, limit=args.limit)
    rows = [
        (
            r.id,
            when(r.due_at),
            r.status,
            r.reason,
            r.turn_id or "",
            r.tokens,
            when(r.started_at),
            when(r.ended_at),
        )
        for r in runs
    ]
    header = ("run", "due", "status", "reason", "turn", "tokens", "started", "ended")
    table(out, header, rows, f"no runs of {args.instance}/{args.name}")
    return 0


def _known(store: Store, args: argparse.Namespace) -> bool:
    state = store.routines.states(args.instance).get(args.name)
    if state is None or not state.active:
        print(f"routines: no routine {args.name!r} for instance {args.instance!r}", file=sys.stderr)
        return False
    return True


def _run_now(store: Store, args: argparse.Namespace, _env: dict[str, str], out: TextIO) -> int:
    if not _known(store, args):
        return EXIT_ERROR
    store.routines.request_run(args.instance, args.name)
    out.write(
        f"{args.instance}/{args.name}: one run asked for now (the fleet holding {args.instance} runs it)\n"
    )
    return 0


def _pause(store: Store, args: argparse.Namespace, _env: dict[str, str], out: TextIO) -> int:
    if not _known(store, args):
        return EXIT_ERROR
    paused = args.verb == "pause"
    store.routines.set_paused(args.instance, args.name, paused, by="operator" if paused else None)
    out.write(f"{args.instance}/{args.name}: {'paused' if paused else 'resumed'}\n")
    return 0


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    p = _parser("routines", "List routines; their history; run, pause or resume one.")
    p.set_defaults(handler=_list)
    sub = p.add_subparsers(dest="verb")
    h = sub.add_parser("history", help="a routine's runs, newest first")
    h.add_argument("instance")
    h.add_argument("name")
    h.add_argument("--limit", type=int, default=50)
    h.set_defaults(handler=_history)
    r = sub.add_parser("run", help="fire one run now")
    r.add_argument("instance")
    r.add_argument("name")
    r.set_defaults(handler=_run_now)
    for verb in ("pause", "resume"):
        sp = sub.add_parser(verb, help=f"{verb} a routine")
        sp.add_argument("instance")
        sp.add_argument("name")
        sp.set_defaults(handler=_pause)
    return _run("routines", argv, p, out or sys.stdout)
