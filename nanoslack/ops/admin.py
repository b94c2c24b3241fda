"""Operator commands (docs/operations.md): ``rooms``, ``hops``, ``senders``, ``turns`` and ``board``.

``senders pending`` lists open approval requests; ``senders approve|deny <instance>
<sender_id>`` answers one as the operator (the same path as an owner's button, so
an Allow replays the held messages and a Deny is remembered). Approving a sender
nobody asked about yet makes them a member right away; answering an already
answered request the other way reverses it.

Every command takes ``--db`` (an SQLAlchemy URL or an SQLite path); without it the
store of ``.env`` / the environment (``DATABASE_URL``, ``NANOSLACK_DB``) is used.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from nanoslack.asks import OPERATOR, OwnerAsks
from nanoslack.budgets import usd
from nanoslack.config import (
    ConfigError,
    configured_instances,
    database_url,
    load_settings,
    parse_rooms,
    read_env_file,
    split_list,
)
from nanoslack.control import HALTED, RoomControl
from nanoslack.gate import Gate
from nanoslack.halts import Halts
from nanoslack.store import ApprovalRow, Store, TurnRow, sqlite_url
from nanoslack.team.board import render as render_board
from nanoslack.tools.ask import ASK_AGENT, ask_key

EXIT_ERROR = 1
EXIT_USAGE = 2


class AdminError(Exception):
    pass


# -- shared ---------------------------------------------------------------------------------


def _env(env_file: Path | None) -> dict[str, str]:
    path = env_file or Path.cwd() / ".env"
    try:
        return dict(load_settings(path).env)
    except ConfigError:
        # A broken unrelated key (a token, an URL) must not stop an operator from
        # reading the store: fall back to the raw keys.
        merged = read_env_file(path) if path.exists() else {}
        merged.update(os.environ)
        return merged


def db_url(db: str | None, env: dict[str, str], base: Path | None = None) -> str:
    """``--db`` (a URL, or an SQLite file relative to the cwd), else the fleet's rule
    (``nanoslack.config.database_url``) with ``base`` as the ``.env``'s folder."""
    if db:
        return db if "://" in db else sqlite_url(str(Path(db).expanduser().resolve()))
    try:
        return database_url(env, base or Path.cwd())
    except ConfigError as exc:
        raise AdminError(str(exc)) from None


def unknown_instance(name: str | None, env: dict[str, str]) -> str | None:
    """Why ``name`` is refused (docs/operations.md): an instance the configuration does not
    name would read or write rows no fleet ever uses. None: no instance given, or a known one."""
    if name is None:
        return None
    known = configured_instances(env)
    if name in known:
        return None
    if not known:
        return f"no instance {name!r}: none is configured (SLACK_INSTANCES in .env, or --env-file)"
    return f"no instance {name!r} is configured; the configured ones: {', '.join(known)}"


def open_store(url: str) -> Store:
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        # Opening would create (and migrate) an empty store for a mistyped path.
        if not path.exists():
            raise AdminError(f"no database at {path} (use --db, or set NANOSLACK_DB)")
    return Store.open(url)


def table(out: TextIO, header: Sequence[str], rows: Sequence[Sequence[object]], empty: str) -> None:
    if not rows:
        out.write(empty + "\n")
        return
    cells = [list(header)] + [["" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for r in cells:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")


def when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else ""


def _parser(prog: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"nanoslack {prog}", description=description)
    p.add_argument("--db", help="SQLAlchemy URL or SQLite file (default: DATABASE_URL / NANOSLACK_DB)")
    p.add_argument("--env-file", type=Path, default=None, help="read this file instead of ./.env")
    return p


def _run(prog: str, argv: list[str] | None, parser: argparse.ArgumentParser, out: TextIO) -> int:
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0) if exc.code in (0, None) else EXIT_USAGE
    env = _env(args.env_file)
    if (problem := unknown_instance(getattr(args, "instance", None), env)) is not None:
        print(f"{prog}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    base = args.env_file.expanduser().resolve().parent if args.env_file else Path.cwd()
    try:
        with open_store(db_url(args.db, env, base)) as store:
            return int(args.handler(store, args, env, out))
    except AdminError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_ERROR


# -- rooms ------------------------------------------------------------------------------------


def _rooms(store: Store, _args: argparse.Namespace, env: dict[str, str], out: TextIO) -> int:
    a2a = parse_rooms(env.get("SLACK_A2A_ROOMS"))
    rows = [
        (
            g.id,
            g.instance,
            g.platform_id,
            g.kind,
            g.engage_mode,
            g.engage_pattern or "",
            g.unknown_sender_policy,
            "yes" if g.channel in a2a else "",
            g.name or "",
        )
        for g in store.groups.list()
    ]
    header = ("ID", "INSTANCE", "ROOM", "KIND", "ENGAGE", "PATTERN", "POLICY", "A2A", "NAME")
    table(out, header, rows, "no messaging groups yet")
    kinds = [
        (r.channel, r.kind, r.lead or "", ",".join(r.members), r.mission or "")
        for r in store.room_kinds.list()
    ]
    if kinds:
        print("", file=out)
        table(out, ("A2A ROOM", "KIND", "LEAD", "MEMBERS", "MISSION"), kinds, "")
    halts = [(h.room, h.halted_by, when(h.halted_at)) for h in Halts(store).halted()]
    if halts:
        print("", file=out)
        table(out, ("HALTED ROOM", "BY", "SINCE"), halts, "")
    return 0


def rooms_main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    p = _parser("rooms", "List messaging groups: one row per conversation and instance.")
    p.set_defaults(handler=_rooms)
    return _run("rooms", argv, p, out or sys.stdout)


# -- halt / resume -------------------------------------------------------------------------------


def _room_control(store: Store, args: argparse.Namespace, env: dict[str, str], out: TextIO) -> int:
    """Halt or resume as the operator; the notice goes out through an instance that
    knows the room (the running fleet's poster sends it; its turn schedulers notice
    the halt on their next poll). A room no instance knows gets no notice: its rows
    stay queued under ``cli``, which no poster sends."""
    room = str(args.channel)
    known = sorted({g.instance for g in store.groups.list() if g.channel == room})
    asks = OwnerAsks(
        store, instance=known[0] if known else OPERATOR, owners=split_list(env.get("SLACK_OWNER"))
    )
    control = RoomControl(store, asks, Halts(store))
    with store.transaction():
        if args.verb == "halt":
            changed = control.halt(room, by_user=OPERATOR).reason == HALTED
        else:
            changed = control.resume(room, by_user=OPERATOR)
    verb = "halted" if args.verb == "halt" else "resumed"
    print(f"{room}: {verb}" if changed else f"{room}: already {verb}", file=out)
    return 0


def halt_main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    p = _parser("halt", "Halt an A2A room: no bot message is admitted and no turn starts until resumed.")
    p.add_argument("channel", help="conversation id (C…/G…)")
    p.set_defaults(handler=_room_control, verb="halt")
    return _run("halt", argv, p, out or sys.stdout)


def resume_main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    p = _parser("resume", "Resume a halted room.")
    p.add_argument("channel", help="conversation id (C…/G…)")
    p.set_defaults(handler=_room_control, verb="resume")
    return _run("resume", argv, p, out or sys.stdout)


# -- hops --------------------------------------------------------------------------------------


def _hops(store: Store, _args: argparse.Namespace, env: dict[str, str], out: TextIO) -> int:
    rows = [(h.room, h.instance, h.count, when(h.last_at)) for h in store.hops.counts()]
    table(out, ("ROOM", "INSTANCE", "HOPS", "LAST"), rows, "no hops counted (every room is fresh)")
    return 0


def hops_main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    p = _parser("hops", "List consecutive bot-message (hop) counts per A2A room and instance.")
    p.set_defaults(handler=_hops)
    return _run("hops", argv, p, out or sys.stdout)


# -- turns -------------------------------------------------------------------------------------

# A failed turn's error is kept whole in the store; a table row shows its start.
ERROR_WIDTH = 60


def _turns(store: Store, args: argparse.Namespace, env: dict[str, str], out: TextIO) -> int:
    if args.steps is not None:
        return _steps(store, args.steps, out)
    turns = store.turns.recent(instance=args.instance, limit=args.limit)
    feedback = store.feedback.counts([t.id for t in turns])
    rows = [
        (
            t.id,
            t.instance,
            t.channel,
            t.thread_key or "(dm)",
            t.status,
            t.messages,
            t.posts,
            t.tokens,
            _feedback(feedback.get(t.id, {})),
            when(t.started_at),
            _short(t.error or ""),
        )
        for t in turns
    ]
    header = (
        "ID",
        "INSTANCE",
        "CHANNEL",
        "THREAD",
        "STATUS",
        "MSGS",
        "POSTS",
        "TOKENS",
        "FEEDBACK",
        "STARTED",
        "ERROR",
    )
    table(out, header, rows, "no turns yet")
    return 0


def _feedback(counts: dict[str, int]) -> str:
    """People's 👍 / 👎 on the turn's reply (docs/agent-surface.md "Feedback"): ``+2 -1``."""
    shown = [
        f"{sign}{counts[value]}" for sign, value in (("+", "positive"), ("-", "negative")) if value in counts
    ]
    return " ".join(shown)


def _steps(store: Store, turn_id: int, out: TextIO) -> int:
    """One turn's model and tool calls, in order (docs/agents.md); under each ``ask_agent``
    call, the turn that answered it (``<step>.0``) and that turn's steps (``<step>.<n>``)."""
    if store.turns.get(turn_id) is None:
        raise AdminError(f"no turn {turn_id}")
    rows = _step_rows(store, turn_id, "")
    header = ("STEP", "KIND", "NAME", "ARGUMENTS", "RESULT", "TOKENS", "USD", "MS", "ERROR")
    table(out, header, rows, f"turn {turn_id} made no model or tool call")
    return 0


def _step_rows(store: Store, turn_id: int, prefix: str) -> list[tuple[object, ...]]:
    asked = {t.thread_key: t for t in store.turns.asked_by(turn_id)}
    rows: list[tuple[object, ...]] = []
    asks = 0
    for s in store.steps.of(turn_id):
        step = f"{prefix}{s.step}"
        rows.append(
            (
                step,
                s.kind,
                s.name,
                _short(s.arguments or ""),
                s.result_size if s.kind == "tool" else "",
                s.tokens if s.kind == "model" else "",
                usd(s.cost_usd) if s.cost_usd is not None else "",
                f"{s.ms:.0f}",
                _short(s.error or ""),
            )
        )
        if s.kind == "tool" and s.name == ASK_AGENT:
            asks += 1
            answered = asked.get(ask_key(turn_id, asks))
            if answered is not None:
                rows.append(_asked_row(answered, f"{step}.0"))
                rows += _step_rows(store, answered.id, f"{step}.")
    return rows


def _asked_row(turn: TurnRow, step: str) -> tuple[object, ...]:
    what = f"asked turn {turn.id}: {turn.status}"
    return (step, "turn", turn.instance, what, "", turn.tokens, "", "", _short(turn.error or ""))


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= ERROR_WIDTH else text[: ERROR_WIDTH - 1] + "…"


def _positive(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {raw!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def turns_main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    p = _parser("turns", "List recent agent turns, newest first.")
    p.add_argument("--instance", help="only this instance's turns")
    p.add_argument("--limit", type=_positive, default=20, help="how many turns (default 20)")
    p.add_argument(
        "--steps", type=_positive, metavar="TURN_ID", help="one turn's model and tool calls, in order"
    )
    p.set_defaults(handler=_turns)
    return _run("turns", argv, p, out or sys.stdout)


# -- board -------------------------------------------------------------------------------------


def _board(store: Store, args: argparse.Namespace, env: dict[str, str], out: TextIO) -> int:
    """A team room's board as its message says it (docs/team-rooms.md): the open tasks that count."""
    print(render_board(store.tasks.open_in(str(args.channel)), time.time()), file=out)
    return 0


def board_main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    p = _parser("board", "Print a room's task board: its open tasks (who, what, progress, age).")
    p.add_argument("channel", help="conversation id (C…/G…)")
    p.set_defaults(handler=_board)
    return _run("board", argv, p, out or sys.stdout)


# -- senders -----------------------------------------------------------------------------------


def _pending(store: Store, _args: argparse.Namespace, env: dict[str, str], out: TextIO) -> int:
    rows = []
    for a in store.approvals.pending():
        user = store.users.get(a.sender_id)
        held = len(store.messages.held(a.instance, a.sender_id))
        name = user.display_name if user else None
        rows.append(
            (
                a.id,
                a.instance,
                a.sender_id,
                name or "",
                a.platform_id or "",
                held,
                a.owner_id or "",
                when(a.created_at),
            )
        )
    header = ("ID", "INSTANCE", "SENDER", "NAME", "ROOM", "HELD", "ASKED", "SINCE")
    table(out, header, rows, "no pending approvals")
    return 0


def _decide(store: Store, args: argparse.Namespace, env: dict[str, str], out: TextIO) -> int:
    allow = args.verb == "approve"
    owners = tuple(split_list(env.get("SLACK_OWNER")))
    gate = Gate(store, OwnerAsks(store, instance=args.instance, owners=owners))
    approval = store.approvals.find(args.instance, args.sender_id)
    if approval is None:
        return _without_request(store, args, allow, out)
    wanted = "approved" if allow else "denied"
    if approval.status == wanted:
        out.write(f"{args.sender_id} is already {wanted} on {args.instance}\n")
        return 0
    decision = gate.decide(approval.id, allow=allow, by_user=OPERATOR, override=approval.status != "pending")
    out.write(_summary(approval, allow, len(decision.released), len(decision.refused)) + "\n")
    return 0


def _without_request(store: Store, args: argparse.Namespace, allow: bool, out: TextIO) -> int:
    if not allow:
        raise AdminError(f"no approval request from {args.sender_id} on {args.instance}")
    agent_group = store.agents.ensure(args.instance)
    store.agents.add_member(agent_group.id, args.sender_id, added_by=OPERATOR)
    out.write(f"approved {args.sender_id} on {args.instance}: now a member (no request was open)\n")
    return 0


def _summary(approval: ApprovalRow, allow: bool, released: int, refused: int) -> str:
    if allow:
        return f"approved {approval.sender_id} on {approval.instance}: {released} held message(s) released"
    return f"denied {approval.sender_id} on {approval.instance}: {refused} held message(s) refused"


def senders_main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    p = _parser("senders", "Pending sender approvals; approve or deny a sender.")
    sub = p.add_subparsers(dest="verb", required=True)
    sub.add_parser("pending", help="list open approval requests").set_defaults(handler=_pending)
    for verb, text in (
        ("approve", "let a sender in and replay their held messages"),
        ("deny", "refuse a sender for good (they are not asked about again)"),
    ):
        sp = sub.add_parser(verb, help=text)
        sp.add_argument("instance", help="instance name, e.g. dana")
        sp.add_argument("sender_id", help="sender id, e.g. slack:bot:B0123 or slack:U0123")
        sp.set_defaults(handler=_decide)
    return _run("senders", argv, p, out or sys.stdout)


def main(argv: list[str] | None = None) -> int:
    """``admin rooms|hops|senders …`` in one entry point."""
    args = list(sys.argv[1:] if argv is None else argv)
    commands = {
        "rooms": rooms_main,
        "hops": hops_main,
        "senders": senders_main,
        "halt": halt_main,
        "resume": resume_main,
        "board": board_main,
    }
    if not args or args[0] not in commands:
        print("usage: admin {rooms,hops,senders,halt,resume,board} [options]", file=sys.stderr)
        return EXIT_USAGE
    return commands[args[0]](args[1:])


if __name__ == "__main__":
    raise SystemExit(main())
