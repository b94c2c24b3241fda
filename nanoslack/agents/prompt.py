"""The user-side turn prompt (docs/agents.md): what every back end is shown.

::

    [Group chat - with alice, eli, fay]
    Mission: ship the release by Friday
    alice: @dana can you plan the release?
    eli: I can take the build.
      (a second line of eli's message is indented)
    It's your turn, dana.
    The room is wrapping up: reply only if essential.

The header lists the *other* members (the agent is told its own name on the last
line); a DM reads ``[Direct message with alice]``. The mission line appears in a room
that has one (``open-room --mission``); ``… N earlier messages not shown`` when the
transcript was cut to its bound; the room's notes (a round's cue, open votes) after the
transcript; the last line only when ``turn.wrapping_up``. Teammates and notes changed
elsewhere since the thread's opening come first (``[Teammates changed] …``,
``[Notes changed] …``, docs/memory.md).

The agent's earlier turns in the thread come before this prompt: the LLM back ends
replay them as model messages (``agents.llm``), the ``command`` back end reads them as
text (``render_thread``). The opening (``opening``) is the system prompt with the
teammates and notes blocks; it stays the same inside a thread, so providers' prompt caches hit.

A routine's run opens with ``[Routine "<name>"]`` and shows its prompt (and its gate's
output) as the transcript. A teammate's ask opens with ``[Asked by <name>]`` and shows its
question (and the files it passed on) as the transcript.
"""

from __future__ import annotations

from nanoslack.agents.types import Line, Turn

DM_ROOM = "DM"
WRAPPING_UP_CUE = "The room is wrapping up: reply only if essential."
CONTINUATION_INDENT = "  "


def is_dm(turn: Turn) -> bool:
    return turn.room.strip().upper() == DM_ROOM


def _others(turn: Turn) -> list[str]:
    return [m for m in turn.members if m not in (turn.name, turn.instance)]


def header(turn: Turn) -> str:
    others = _others(turn)
    if is_dm(turn):
        # A DM whose member list was not resolved still names the person talking.
        who = ", ".join(others) or _last_human(turn) or "someone"
        return f"[Direct message with {who}]"
    if not others:
        return f"[{turn.room}]"
    return f"[{turn.room} - with {', '.join(others)}]"


def _last_human(turn: Turn) -> str:
    humans = [line.sender_name for line in turn.transcript if not line.from_bot]
    return humans[-1] if humans else ""


HANDOFF_GUIDE = (
    "A teammate handed you work privately: answer them with send_to_agent, or post in the "
    "thread with send_message; if it is only for your information, staying silent is fine."
)
EARLIER_NOT_SHOWN = "… {n} earlier messages not shown"
# Edits and deletes (docs/agents.md): how a turn is shown an edit made after an earlier
# turn saw the message, and a message deleted since (in its transcript, and in place of
# its words in the kept history of the turns that were shown it).
EDITED_TAG = "[edited]"
DELETED_LINE = "[a message was deleted]"


def render_line(line: Line) -> str:
    if line.handoff:
        return line.text
    first, *rest = line.text.splitlines() or [""]
    # Indenting continuation lines keeps "name: text" unambiguous when a message
    # itself contains something that looks like "bob: hi" on a new line.
    return "\n".join([f"{line.sender_name}: {first}", *(CONTINUATION_INDENT + r for r in rest)])


EARLIER_TURNS_NOT_SHOWN = "… {n} earlier turns not shown"
NEW_SINCE = "--- new since your last turn ---"
ORIGIN_TAG = '[{kind} "{name}"]'
ASKED_TAG = "[Asked by {name}]"
ASKED_GUIDE = (
    "{name} asked you this and waits for your answer: answer with send_message. What you send goes "
    "to {name} only, as the answer; nothing is posted in Slack."
)


def render_prompt(turn: Turn) -> str:
    lines = [header(turn)]
    if turn.origin is not None:
        # A turn no message woke says so first: nobody spoke (a routine's schedule woke it).
        lines.insert(0, ORIGIN_TAG.format(kind=turn.origin.kind.capitalize(), name=turn.origin.name))
    elif turn.asked_by:
        lines.insert(0, ASKED_TAG.format(name=turn.asked_by))
    if turn.mission:
        lines.append(f"Mission: {turn.mission}")
    lines.extend(turn.notes_changed)
    if turn.earlier_not_shown:
        lines.append(EARLIER_NOT_SHOWN.format(n=turn.earlier_not_shown))
    lines.extend(render_line(line) for line in turn.transcript)
    if turn.origin is not None:
        if turn.origin.guide:
            lines.append(turn.origin.guide)
    elif turn.asked_by:
        lines.append(ASKED_GUIDE.format(name=turn.asked_by))
    elif any(line.handoff for line in turn.transcript):
        lines.append(HANDOFF_GUIDE)
    lines.extend(turn.notes)
    lines.append(f"It's your turn, {turn.name}.")
    if turn.wrapping_up:
        lines.append(WRAPPING_UP_CUE)
    return "\n".join(lines)


def opening(turn: Turn, system: str | None = None) -> str:
    """The request's opening: the system prompt (``system``: a back end's own version of
    it), then the teammates and notes blocks (``turn.memory``)."""
    base = (turn.system if system is None else system).rstrip()
    notes = "\n".join(turn.memory)
    return f"{base}\n\n{notes}" if base and notes else (base or notes)


def render_thread(turn: Turn) -> str:
    """The whole thread as text, for a back end that reads one prompt (``command``): its
    earlier turns (each prompt, then what it posted), then the new part, marked."""
    if not turn.history:
        return render_prompt(turn)
    parts: list[str] = []
    for i, past in enumerate(turn.history):
        parts.append(past.prompt)
        parts.extend(f"{turn.name}: {post}" for post in past.posts)
        if i == 0 and turn.history_not_shown:
            parts.append(EARLIER_TURNS_NOT_SHOWN.format(n=turn.history_not_shown))
    parts.append(NEW_SINCE)
    parts.append(render_prompt(turn))
    return "\n".join(parts)
