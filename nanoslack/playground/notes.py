"""Timeline notes: what the fleet decided that Slack itself would never show.

A note is about one message (``channel``, ``ts``) as one instance saw it, or about a
conversation as a whole (``ts`` None). ``kind`` is a short word the page styles;
the page renders a kind it does not know like any other note, so new kinds (a room
halted or paused) need no change here. Sources: the fleet's ``on_outcome`` hook
(guard, router, gate), the ``turns`` table (a turn that stayed silent or failed) and
its ``turn_steps`` (the tools a turn called: a skill read, a handoff, a refusal; a
note an agent kept or forgot is a ``memory`` note, its refusal ``memory_refused``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from nanoslack.a2a import HOP_LIMIT_REACHED, ROOM_NOT_LISTED
from nanoslack.inbound import Inbound
from nanoslack.pipeline import Outcome
from nanoslack.store import RunRow, StepRow
from nanoslack.store.memories import parse_ref
from nanoslack.store.turns import TurnRow

MAX_NOTES = 5000
MEMORY = "memory"
MEMORY_REFUSED = "memory_refused"
MEMORY_TOOLS = ("remember", "forget")
# The turn statuses whose recording kept what its tools did (docs/memory.md); a failed
# or halted turn's notes stay drafts nobody sees.
KEPT = ("done", "silent", "budget")
TURN_NOTES = {
    "silent": ("turn_silent", "read it and had nothing to add (turn silent)"),
    "failed": ("turn_failed", "turn failed"),
    "budget": ("turn_budget", "daily token budget spent: no answer"),
}


@dataclass(frozen=True, slots=True)
class Note:
    id: int
    kind: str
    channel: str
    ts: str | None
    instance: str
    text: str
    at: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class NoteBook:
    """Keeps the notes in arrival order and tells ``listeners`` about each new one."""

    def __init__(self, senders: Callable[[], dict[str, str]], max_hops: int) -> None:
        self._senders = senders
        self._max_hops = max_hops
        self.notes: list[Note] = []
        self.listeners: list[Callable[[Note], None]] = []
        self._turns_seen: set[int] = set()
        self._runs_seen: set[int] = set()
        # The highest hop admitted per room since a human last spoke there.
        self._hops: dict[str, int] = {}

    def add(self, kind: str, channel: str, ts: str | None, instance: str, text: str) -> Note:
        note = Note(len(self.notes) + 1, kind, channel, ts, instance, text, time.time())
        self.notes.append(note)
        del self.notes[:-MAX_NOTES]
        for listen in self.listeners:
            listen(note)
        return note

    def on_outcome(self, msg: Inbound, outcome: Outcome) -> None:
        """The fleet's hook: one outcome per (instance, message)."""
        seen = outcome.msg or msg
        for kind, text in describe(seen, outcome, self._senders(), self._max_hops):
            self.add(kind, seen.channel, seen.ts, seen.instance, text)
        if seen.hop:
            self._hops[seen.channel] = max(self._hops.get(seen.channel, 0), seen.hop)
        elif outcome.status == "processed" and not seen.is_bot:
            self._human_spoke(seen)

    def _human_spoke(self, msg: Inbound) -> None:
        # Once per message, not per instance: every bot heard the same human.
        was = self._hops.pop(msg.channel, 0)
        if was:
            self.add(
                "hops_reset", msg.channel, msg.ts, "", f"a human spoke: hop count {was} → 0, bots may go on"
            )

    def on_turns(
        self, rows: Iterable[TurnRow], steps: Callable[[int], list[StepRow]] = lambda _id: []
    ) -> None:
        """Finished turns from the store (newest first is fine): notes for the tools they
        called, and for those that posted nothing."""
        for row in sorted(rows, key=lambda r: r.id):
            if row.id in self._turns_seen or row.status == "running":
                continue
            self._turns_seen.add(row.id)
            for step in steps(row.id):
                if step.kind != "tool" or step.name == "send_message":
                    continue
                if step.name in MEMORY_TOOLS:
                    kind, text = describe_memory(step, kept=row.status in KEPT, status=row.status)
                else:
                    kind, text = "tool", describe_step(step)
                self.add(kind, row.channel, row.through_ts, row.instance, text)
            if row.status in TURN_NOTES:
                kind, text = TURN_NOTES[row.status]
                detail = f": {row.error}" if row.error and row.status == "failed" else ""
                self.add(kind, row.channel, row.through_ts, row.instance, text + detail)

    def on_routine_runs(self, rows: Iterable[RunRow], channel_of: Callable[[RunRow], str]) -> None:
        """Finished routine runs (docs/routines.md): one note each, in the conversation the
        routine posts to; a missed due time is not worth a note."""
        for row in sorted(rows, key=lambda r: r.id):
            if row.id in self._runs_seen or row.status in ("running", "missed"):
                continue
            self._runs_seen.add(row.id)
            why = f" ({row.reason})" if row.reason else ""
            self.add(
                "routine", channel_of(row), None, row.instance, f"routine {row.routine}: {row.status}{why}"
            )


def describe_step(step: StepRow) -> str:
    """A tool call as a note: ``read_skill {"name":"handoff"}``, or its refusal."""
    call = f"{step.name} {step.arguments or ''}".strip()
    return f"{call} → {step.error}" if step.error else call


def describe_memory(step: StepRow, *, kept: bool = True, status: str = "done") -> tuple[str, str]:
    """A ``remember`` or ``forget`` call as a note: what was kept or forgotten, or why not."""
    if step.error:
        return MEMORY_REFUSED, f"🧠 {step.error}"
    args = _arguments(step.arguments)
    ref = parse_ref(str(args.get("id", "")))
    if step.name == "remember" and "text" in args:
        scope = str(args.get("scope") or "").strip().lower() or "self"
        done = f"remembered ({scope}): {str(args['text']).strip()}"
    elif step.name == "forget" and ref is not None:
        done = f"forgot m{ref}"
    else:  # arguments cut too short to read: shown as recorded
        done = describe_step(step)
    if not kept:
        return MEMORY_REFUSED, f"🧠 not kept, the turn {status}: {done}"
    return MEMORY, f"🧠 {done}"


def _arguments(raw: str | None) -> dict[str, Any]:
    """A step's recorded arguments (JSON, cut when long); {} when they cannot be read."""
    try:
        args = json.loads(raw or "{}")
    except ValueError:
        return {}
    return args if isinstance(args, dict) else {}


def describe(msg: Inbound, outcome: Outcome, senders: dict[str, str], max_hops: int) -> list[tuple[str, str]]:
    """(kind, text) notes for one instance's outcome; the instance name is not in the text,
    so the page can merge the same note from several instances into one line."""
    if outcome.status == "dropped":
        if outcome.reason == HOP_LIMIT_REACHED:
            return [
                (
                    "hop_limit",
                    f"hop limit reached ({max_hops}/{max_hops}): not listening until a human speaks",
                )
            ]
        if outcome.reason == ROOM_NOT_LISTED:
            return [("dropped", "dropped: this conversation is not in SLACK_A2A_ROOMS")]
        return [("dropped", f"dropped: {outcome.reason}")]
    if outcome.status == "failed":
        return [("failed", f"processing failed: {outcome.reason}")]
    notes: list[tuple[str, str]] = []
    if msg.hop:
        notes.append(("admitted", f"admitted as {msg.sender_id} · hop {msg.hop}/{msg.hop_limit}"))
    verdict = outcome.verdict
    who = senders.get(msg.sender_id, msg.sender_id)
    if verdict is None or verdict.action == "allow":
        return notes
    if verdict.action == "hold":
        notes.append(("approval_requested", f"held: asked the owner to approve {who} (approval DM sent)"))
    else:
        notes.append((verdict.action, f"{verdict.action}: {verdict.reason}"))
    return notes
