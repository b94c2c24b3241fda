"""The team tools (docs/team-rooms.md): ``report``, ``vote`` and ``ballot`` in every group room,
``directive`` in ``chain`` rooms.

- ``report(status, text, reply_to, progress_done, progress_total, step)``: a ``working``
  (or ``input_required``) report answering a request puts a task on the room's board, a
  later one on the same request updates it, ``completed``/``failed``/``canceled`` takes
  it off. Without ``reply_to`` a report is about the instance's open task in this thread,
  or (when it has none) opens one on the message the turn answers.
- ``vote(question, options)`` (yes/no when none are given) puts a question to the room:
  its people get a button per option, its bots are woken to ``ballot``.
- ``ballot(vote_ts, choice)``: a bot's answer; a second replaces the first. Without
  ``vote_ts``: the vote this turn opened, else the room's newest open vote.
- ``directive(to, task)``: the lead of a ``chain`` room gives a worker a task (a post in
  the thread addressed to the worker, which wakes it); anyone else's directive, and a
  directive in any other kind of room, is refused by the room: a note there says so, and
  the refusal is the tool's result.

As with the host tools, a call never touches Slack or the store: what it means to do is
left in the turn's ``TurnEffects.acts`` and committed with the turn (``nanoslack.team``
applies them inside the recorder's transaction). Reading the store to check a call is
fine; ``vote`` asks the edge who is in the room (the people it waits for are fixed then).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from pydantic import Field

from nanoslack.agents import ToolResult, Turn
from nanoslack.agents.tool import Arguments, Tool
from nanoslack.replies import MAX_POSTS
from nanoslack.store import MessageRow, RoomRow, Store, VoteRow
from nanoslack.store.tasks import CLOSED_STATUSES, STATUSES
from nanoslack.tools.host import TurnEffects

REPORT = "report"
VOTE = "vote"
BALLOT = "ballot"
DIRECTIVE = "directive"

DEFAULT_OPTIONS = ("yes", "no")
MAX_OPTIONS = 10
MAX_OPTION_CHARS = 75  # a Slack button's label
MAX_QUESTION_CHARS = 300
MAX_STEP_CHARS = 200
MAX_TEXT_CHARS = 500
_TS = re.compile(r"\d{1,12}\.\d{1,9}")
A = TypeVar("A", bound=Arguments)


class ReportArguments(Arguments):
    # A string checked by ``report`` (any case), offered as the enum of the statuses.
    status: str = Field(description="Where the task stands.", json_schema_extra={"enum": list(STATUSES)})
    text: str = Field("", description="What the task is (first report), or what changed.")
    reply_to: str = Field(
        "",
        description="The ts of the message that asked. Leave it out to report on your open task in this "
        "thread (or, when you have none, on the message you are answering).",
    )
    progress_done: int | None = Field(None, ge=0, description="Steps done so far.")
    progress_total: int | None = Field(None, ge=0, description="Steps in all.")
    step: str = Field("", description="What you are doing now.")


class VoteArguments(Arguments):
    question: str = Field(description="The question, self-contained.")
    options: list[str] | str | None = Field(None, description="The choices (default: yes, no).")


class BallotArguments(Arguments):
    vote_ts: str = Field(
        "", description="The vote's ts (leave it out for the newest open vote, or the one you just opened)."
    )
    choice: str = Field(description="One of the vote's options.")


class DirectiveArguments(Arguments):
    to: str = Field(description="The worker's name, e.g. eli.")
    task: str = Field(description="What they are to do, self-contained.")


REPORT_DESCRIPTION = (
    "Report on work you were asked to do, so the room's task board shows it. When someone asks you to "
    "DO something: report status working (that puts the task on the board), then report again as it "
    "goes (progress_done, progress_total, step: '3 of 5, writing the tests'), and finish with completed "
    "(or failed, saying why, or canceled). input_required: you are waiting for someone. Post your actual "
    "answer with send_message as usual."
)
VOTE_DESCRIPTION = (
    "Put a question to the room: people answer with buttons, bots with ballot. It closes by itself (a "
    "reminder first, then the result naming who abstained), or at once when everyone has answered."
)
BALLOT_DESCRIPTION = (
    "Answer a vote (your turn lists the open votes you have not answered as 'vote <vote_ts>: …'). "
    "Voting again replaces your earlier ballot. Vote for what you actually think."
)
DIRECTIVE_DESCRIPTION = (
    "As the lead of this chain room, give a worker a task: it is posted in the thread addressed to them "
    "and wakes them; they report back with report."
)


# -- what the calls mean to do (applied with the turn by ``nanoslack.team``) --------------------


@dataclass(frozen=True, slots=True)
class Report:
    status: str
    text: str
    request_ts: str
    progress_done: int | None = None
    progress_total: int | None = None
    step: str | None = None


@dataclass(frozen=True, slots=True)
class VoteOpen:
    question: str
    options: tuple[str, ...]
    humans: tuple[str, ...]  # Slack user ids
    bots: tuple[str, ...]  # instance names


@dataclass(frozen=True, slots=True)
class Ballot:
    vote_id: int | None  # None: the vote this turn opened
    choice: str


@dataclass(frozen=True, slots=True)
class DirectiveRefused:
    """A note in the room: the room refused a directive."""

    text: str


@runtime_checkable
class Voters(Protocol):
    """Who is in a room, as the edge knows it (``slack.names.SlackNames``): its people
    (Slack user ids of humans in the workspace) and the fleet's bots there (names)."""

    async def room_voters(self, channel: str) -> tuple[tuple[str, ...], tuple[str, ...]]: ...


def directive_text(to: str, task: str) -> str:
    return f"📌 Directive for @{to}: {task}"


class TeamTools:
    """One turn's team tools (``tools()``: a list of ``agents.tool.Tool``)."""

    def __init__(
        self,
        *,
        instance: str,
        store: Store,
        turn: Turn,
        msgs: Sequence[MessageRow],
        effects: TurnEffects,
        voters: Voters | None = None,
    ) -> None:
        self._me = instance
        self._store = store
        self._turn = turn
        self._msgs = msgs
        self.effects = effects
        self._voters = voters
        self._room: RoomRow | None = None
        self._opened_here: str | None = None  # request_ts of a task this turn opened

    @property
    def _group(self) -> bool:
        return bool(self._turn.thread_ts)

    @property
    def room(self) -> RoomRow:
        if self._room is None:
            self._room = self._store.room_kinds.get(self._turn.channel)
        return self._room

    def tools(self) -> list[Tool[Any]]:
        """In a DM none is offered, and a call says they work in group rooms; ``directive``
        is offered in ``chain`` rooms only (elsewhere the room refuses it, and says so)."""
        group = self._group
        chain = group and self.room.kind == "chain"
        return [
            Tool(
                REPORT,
                REPORT_DESCRIPTION,
                ReportArguments,
                self._in_group(REPORT, self._report),
                offered=group,
            ),
            Tool(VOTE, VOTE_DESCRIPTION, VoteArguments, self._in_group(VOTE, self._vote), offered=group),
            Tool(
                BALLOT,
                BALLOT_DESCRIPTION,
                BallotArguments,
                self._in_group(BALLOT, self._ballot),
                offered=group,
            ),
            Tool(
                DIRECTIVE,
                DIRECTIVE_DESCRIPTION,
                DirectiveArguments,
                self._in_group(DIRECTIVE, self._directive),
                offered=chain,
            ),
        ]

    def _in_group(
        self, name: str, run: Callable[[A], Awaitable[ToolResult]]
    ) -> Callable[[A], Awaitable[ToolResult]]:
        async def guarded(args: A) -> ToolResult:
            if not self._group:
                return ToolResult(
                    f"not done: {name} works in a group conversation, not in a direct message", True
                )
            return await run(args)

        return guarded

    # -- report -------------------------------------------------------------------------------

    async def _report(self, args: ReportArguments) -> ToolResult:
        status = args.status.strip().lower()
        if status not in STATUSES:
            return ToolResult(f"not reported: status must be one of {', '.join(STATUSES)}", True)
        request_ts = args.reply_to.strip() or self._default_request()
        if not _TS.fullmatch(request_ts):
            return ToolResult("not reported: reply_to must be a message ts such as 1712345678.000100", True)
        report = Report(
            status=status,
            text=args.text.strip()[:MAX_TEXT_CHARS],
            request_ts=request_ts,
            progress_done=args.progress_done,
            progress_total=args.progress_total,
            step=args.step.strip()[:MAX_STEP_CHARS] or None,
        )
        self.effects.acts.append(report)
        if status not in CLOSED_STATUSES:
            self._opened_here = request_ts
            return ToolResult(f"reported ({status}): the task is on the room's board")
        self._opened_here = None
        return ToolResult(f"reported ({status}): the task is off the board")

    def _default_request(self) -> str:
        if self._opened_here:
            return self._opened_here
        mine = self._store.tasks.mine_in_thread(self._turn.channel, self._turn.thread_ts, self._me)
        if mine:
            return mine[0].request_ts
        return self._msgs[-1].ts if self._msgs else ""

    # -- votes --------------------------------------------------------------------------------

    async def _vote(self, args: VoteArguments) -> ToolResult:
        question = " ".join(args.question.split())
        if not question:
            return ToolResult("no vote: the question is empty", True)
        if len(question) > MAX_QUESTION_CHARS:
            return ToolResult(f"no vote: a question is at most {MAX_QUESTION_CHARS} characters", True)
        options = _options(args.options)
        if isinstance(options, str):
            return ToolResult(f"no vote: {options}", True)
        if any(isinstance(act, VoteOpen) for act in self.effects.acts):
            return ToolResult("no vote: a turn opens one vote at most", True)
        humans, bots = await self._electorate()
        self.effects.acts.append(VoteOpen(question, options, humans, bots))
        return ToolResult(
            f"vote posted ({', '.join(options)}): people answer with its buttons, bots with ballot; "
            "it closes at once when everyone has answered, else after a reminder"
        )

    async def _electorate(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        humans: tuple[str, ...] = ()
        bots: tuple[str, ...] = ()
        if self._voters is not None:
            humans, bots = await self._voters.room_voters(self._turn.channel)
        # The room's row names the fleet's bots there, whichever process runs them.
        members = self.room.members
        return humans, tuple(dict.fromkeys(members or bots))

    async def _ballot(self, args: BallotArguments) -> ToolResult:
        choice = args.choice.strip()
        vote_ts = args.vote_ts.strip()
        vote: VoteRow | None
        if vote_ts:
            vote = self._store.votes.by_ts(self._turn.channel, vote_ts)
            if vote is None:
                return ToolResult(f"no ballot: there is no vote {vote_ts} in this room", True)
        elif any(isinstance(act, VoteOpen) for act in self.effects.acts):
            opened = next(act for act in self.effects.acts if isinstance(act, VoteOpen))
            return self._cast(None, opened.options, choice)
        else:
            open_votes = self._store.votes.open_in(self._turn.channel)
            if not open_votes:
                return ToolResult("no ballot: there is no open vote in this room", True)
            vote = open_votes[0]
        if not vote.is_open:
            return ToolResult(f"no ballot: that vote has closed ({vote.result or vote.status})", True)
        return self._cast(vote.id, vote.options, choice)

    def _cast(self, vote_id: int | None, options: Sequence[str], choice: str) -> ToolResult:
        chosen = next((o for o in options if o.casefold() == choice.casefold()), None)
        if chosen is None:
            return ToolResult(f"no ballot: choose one of {', '.join(options)}", True)
        self.effects.acts.append(Ballot(vote_id, chosen))
        return ToolResult(f"ballot cast: {chosen} (voting again replaces it)")

    # -- directives ---------------------------------------------------------------------------

    async def _directive(self, args: DirectiveArguments) -> ToolResult:
        to = args.to.strip().lstrip("@").lower()
        task = args.task.strip()
        room = self.room
        refusal = self._directive_refusal(room)
        if refusal is not None:
            note, result = refusal
            self.effects.acts.append(DirectiveRefused(note))
            return ToolResult(result, is_error=True)
        if not to or not task:
            return ToolResult("not sent: name the worker (to) and the task", True)
        if to == self._me:
            return ToolResult("not sent: a directive goes to a worker, not to yourself", True)
        if room.members and to not in room.members:
            return ToolResult(
                f"not sent: {to} is not in this room (the room has {', '.join(room.members)})", True
            )
        if len(self.effects.posts) >= MAX_POSTS:
            return ToolResult(f"not sent: a turn posts at most {MAX_POSTS} messages", True)
        self.effects.posts.append(directive_text(to, task))
        return ToolResult(f"directive posted for {to}: they are woken and report back")

    def _directive_refusal(self, room: RoomRow) -> tuple[str, str] | None:
        """(the room's note, the tool's result) when this directive is not the room's to give."""
        me = self._me
        if room.kind == "round":
            return (
                f"⛔ The room refused a directive from {me}: in a round room nobody gives orders.",
                "refused by the room: in a round room nobody gives orders (ask, or say what you think)",
            )
        if room.kind != "chain":
            return (
                f"⛔ The room refused a directive from {me}: directives are for chain rooms.",
                "refused by the room: directives are for chain rooms (mention a teammate, or send_to_agent)",
            )
        if room.lead != me:
            lead = room.lead or "nobody (no lead is set)"
            return (
                f"⛔ The room refused a directive from {me}: in this chain room only the lead, {lead}, "
                "gives directives.",
                f"refused by the room: only the lead ({lead}) gives directives here; report to them instead",
            )
        return None


def _options(raw: Any) -> tuple[str, ...] | str:
    """The vote's options, or why they will not do."""
    if raw is None or raw == [] or raw == "":
        return DEFAULT_OPTIONS
    if isinstance(raw, str):
        raw = raw.split(",")
    if not isinstance(raw, list) or not all(isinstance(o, str) for o in raw):
        return "options must be a list of strings"
    options = tuple(" ".join(o.split()) for o in raw if o.strip())
    if len(options) < 2:
        return "a vote needs at least two options"
    if len(options) > MAX_OPTIONS:
        return f"a vote has at most {MAX_OPTIONS} options"
    if len({o.casefold() for o in options}) < len(options):
        return "the options must differ"
    if any(len(o) > MAX_OPTION_CHARS for o in options):
        return f"an option is at most {MAX_OPTION_CHARS} characters"
    return options
