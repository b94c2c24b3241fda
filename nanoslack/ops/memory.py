"""``nanoslack memory``: the notes agents keep (docs/memory.md), for operators.

::

    nanoslack memory [INSTANCE] [--room CHANNEL]      list notes
    nanoslack memory add INSTANCE TEXT [--scope self|private|room] [--room CHANNEL]
    nanoslack memory forget ID                        remove a note (m12 or 12)

A change applies from each agent's next turn, in every process (the notes are read from
the store at each turn); a thread that already showed a note hears that it was
forgotten, or that one was added, at the head of its next turn.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from nanoslack.config.memory import NOTE_CHARS
from nanoslack.ops.admin import EXIT_USAGE, _parser, _run, table, when
from nanoslack.store import Store
from nanoslack.store.memories import SCOPES, parse_ref


def _list(store: Store, args: argparse.Namespace, _env: dict[str, str], out: TextIO) -> int:
    room = f"slack:{args.room}" if args.room else None
    notes = store.memories.all(instance=args.instance, conversation=room)
    rows = [
        (
            n.ref,
            n.instance,
            n.scope,
            n.conversation.removeprefix("slack:"),
            n.asked_by,
            when(n.created_at),
            n.text,
        )
        for n in notes
    ]
    table(out, ("ID", "INSTANCE", "SCOPE", "ROOM", "ASKED BY", "CREATED", "TEXT"), rows, "no notes")
    return 0


def _add(store: Store, args: argparse.Namespace, _env: dict[str, str], out: TextIO) -> int:
    text = " ".join(args.text.split())
    if not text:
        print("memory add: the text is empty", file=sys.stderr)
        return EXIT_USAGE
    if len(text) > NOTE_CHARS:
        print(
            f"memory add: a note is at most {NOTE_CHARS} characters (this one has {len(text)})",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.scope == "room" and not args.room:
        print("memory add: a room note needs --room CHANNEL", file=sys.stderr)
        return EXIT_USAGE
    note_id = store.memories.add(
        instance=args.instance,
        scope=args.scope,
        text=text,
        asked_by="operator",
        conversation=f"slack:{args.room}" if args.room else "",
    )
    out.write(f"added m{note_id} ({args.scope} note of {args.instance})\n")
    return 0


def _forget(store: Store, args: argparse.Namespace, _env: dict[str, str], out: TextIO) -> int:
    note_id = parse_ref(args.id)
    if note_id is None:
        print(f"memory forget: {args.id!r} is not a note id (they look like m12)", file=sys.stderr)
        return EXIT_USAGE
    if store.memories.get(note_id) is None:
        print(f"memory forget: no note m{note_id}", file=sys.stderr)
        return 1
    store.memories.delete([note_id])
    out.write(f"forgot m{note_id}\n")
    return 0


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    stream = out or sys.stdout
    if args and args[0] == "add":
        p = _parser("memory add", "Add a note an agent sees from its next turn.")
        p.add_argument("instance", help="instance name, e.g. dana")
        p.add_argument("text", help="the note (at most 500 characters)")
        p.add_argument("--scope", choices=SCOPES, default="self", help="who sees it (default self)")
        p.add_argument("--room", help="the conversation of a room note (C… or G…)")
        p.set_defaults(handler=_add)
        return _run("memory add", args[1:], p, stream)
    if args and args[0] == "forget":
        p = _parser("memory forget", "Remove a note from every agent's next turn.")
        p.add_argument("id", help="the note's id, e.g. m12")
        p.set_defaults(handler=_forget)
        return _run("memory forget", args[1:], p, stream)
    p = _parser("memory", "List the notes agents keep (see also: memory add, memory forget).")
    p.add_argument("instance", nargs="?", default=None, help="only this instance's notes")
    p.add_argument("--room", help="only the room notes of this conversation")
    p.set_defaults(handler=_list)
    return _run("memory", args, p, stream)


if __name__ == "__main__":
    raise SystemExit(main())
