"""The host tools (docs/agents.md): what the fleet itself offers every agent.

- ``send_message(text)``: a post to the conversation (at most ``MAX_POSTS`` a turn);
- ``read_skill(name)``: ``teammates/_skills/<name>.md``, read fresh;
- ``send_to_agent(to, message, files)``: hand a scoped task to a sibling instance
  (a configured one, else the refusal lists those it may reach; ``NANOSLACK_A2A_ALLOW``,
  the chief exempt both ways, never to itself, a relay two deep at most, group
  conversations only: in a DM the refusal names ``ask_agent``, ``nanoslack.tools.ask``),
  with the files the turn saw that it names (a name it was not shown is refused with
  those it was);
- ``message_owner(text)``: a DM to every owner from this instance, once a turn;
- ``react(emoji)``: a reaction on the message the turn answers (no post, no hop);
- ``send_file(filename, content, title, comment)``: a text file the agent wrote, uploaded
  into the thread the turn answers (one of the turn's posts; at most ``MAX_FILE_BYTES``).

A call never touches Slack: what it means to do is collected in ``TurnEffects`` and
committed with the turn (``turns.record``). A refusal is the tool's result, saying why.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field

from nanoslack import tracing
from nanoslack.agents import SeenFile, ToolResult
from nanoslack.agents.teammates import list_skills
from nanoslack.agents.tool import (
    READ_SKILL,
    READ_SKILL_DESCRIPTION,
    SEND_MESSAGE,
    SEND_MESSAGE_DESCRIPTION,
    Arguments,
    ReadSkill,
    SendMessage,
    Tool,
)
from nanoslack.inbound import FLEET_SENDER
from nanoslack.replies import MAX_POSTS
from nanoslack.store import MessageRow

SEND_TO_AGENT = "send_to_agent"
MESSAGE_OWNER = "message_owner"
REACT = "react"
SEND_FILE = "send_file"
HOST_TOOL_NAMES = frozenset({SEND_MESSAGE, READ_SKILL, SEND_TO_AGENT, MESSAGE_OWNER, REACT, SEND_FILE})
# A file an agent sends is text it wrote (a report, a CSV, a patch): at most 1 MB of UTF-8.
MAX_FILE_BYTES = 1024 * 1024
MAX_FILENAME_CHARS = 255
MAX_REACTIONS = 3
# Slack's emoji names: lower case, digits, ``_``, ``-``, ``+``, ``'`` (``thumbsup``, ``+1``).
_EMOJI_NAME = re.compile(r"[a-z0-9_+'-]{1,100}")
# A relay goes two hops at most: a dispatch and a reply.
MAX_RELAY_DEPTH = 2
MAX_HANDOFFS = 3
# The files a handoff (or an ask, ``nanoslack.tools.ask``) may pass on.
MAX_PASSED_FILES = 10
_SKILL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# A file's name: no directory (a slash or a backslash), no control characters.
_FILENAME = re.compile(r"[^/\\\x00-\x1f\x7f]+")


class SendToAgent(Arguments):
    to: str = Field(description="The teammate's name, e.g. eli.")
    message: str = Field(description="What you need from them, self-contained.")
    files: list[str] = Field(
        default_factory=list, description="Names of files of this conversation they should see (optional)."
    )


class React(Arguments):
    emoji: str = Field(description="The emoji's Slack name, e.g. white_check_mark, eyes, thumbsup, tada.")


class SendFile(Arguments):
    filename: str = Field(description="The file's name and extension, e.g. report.md, data.csv, fix.patch.")
    content: str = Field(description="The whole text of the file (at most 1 MB).")
    title: str = Field(default="", description="A title shown above the file (default: the filename).")
    comment: str = Field(default="", description="A message posted with the file (Slack mrkdwn), or empty.")


class MessageOwner(Arguments):
    text: str = Field(description="The message text (Slack mrkdwn).")


@dataclass(frozen=True, slots=True)
class Handoff:
    to: str
    text: str
    # The handing turn's trace (W3C ``traceparent``; None while traces are off): the
    # recipient's turn continues it (docs/operations.md "Traces").
    traceparent: str | None = None
    # The files the handing turn saw that it passes on: the recipient's turn is shown them
    # as the handing turn was (``turns.record``: by reference, through ``message_files``).
    files: tuple[SeenFile, ...] = ()


@dataclass(frozen=True, slots=True)
class FileOut:
    """A file ``send_file`` means to post into the thread (docs/agents.md)."""

    filename: str
    title: str
    content: str
    comment: str


@dataclass
class TurnEffects:
    """What a turn's tool calls mean to do, committed with the turn (exactly once)."""

    posts: list[str] = field(default_factory=list)
    handoffs: list[Handoff] = field(default_factory=list)
    owner_messages: list[str] = field(default_factory=list)
    reactions: list[str] = field(default_factory=list)  # emoji names, on the message answered
    files: list[FileOut] = field(default_factory=list)  # ``send_file``: each one of the turn's posts
    tokens: int = 0  # what the turn's model calls spent (for the metrics)
    cached_tokens: int = 0  # of which read from a provider's prompt cache
    cost_usd: float = 0.0  # their price in US dollars, of the calls priced (for the metrics)
    # What other tool sets of the fleet mean to do (``nanoslack.tools.team``: reports,
    # votes, ballots, a refused directive's note); the recorder has the room features commit
    # them in the turn's transaction (``RoomFeature.apply``).
    acts: list[Any] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class HostContext:
    """What the host tools need to know about the instance and the turn."""

    instance: str
    skills_dir: Path
    owners: tuple[str, ...]
    is_dm: bool
    handoff_depth: int  # the deepest handoff among the messages the turn answers
    may_hand_off: Any  # (sender, recipient) -> bool: ToolSettings.may_hand_off
    # The Slack message the turn answers (channel, ts), what ``react`` reacts to; None when
    # the turn answers none (a routine's, a handoff's).
    react_to: tuple[str, str] | None = None
    # The fleet's configured instances (``ToolSettings.instances``), the names a handoff can
    # reach; None when the fleet is not known (a toolbox built alone): no name is checked.
    fleet: tuple[str, ...] | None = None
    # The teammate whose ``ask_agent`` this turn answers ("" for any other turn): the turn
    # posts nothing in Slack, so it neither hands off nor messages the owners.
    asked_by: str = ""
    # A turn no message woke (a routine's): its posts are joined into one new thread, where
    # ``send_file`` has no thread to go to; a handoff's answer goes to that thread
    # (``turns.record``: the handoff waits for the post).
    sourced: bool = False
    # The files the turn saw (``Turn.files``): those a handoff may pass on.
    files_seen: tuple[SeenFile, ...] = ()


class HostTools:
    def __init__(self, ctx: HostContext, effects: TurnEffects) -> None:
        self._ctx = ctx
        self.effects = effects

    def tools(self) -> list[Tool[Any]]:
        return [
            Tool(SEND_MESSAGE, SEND_MESSAGE_DESCRIPTION, SendMessage, self._post),
            Tool(READ_SKILL, READ_SKILL_DESCRIPTION, ReadSkill, self._read),
            Tool(
                SEND_TO_AGENT,
                "Hand a scoped task, or an answer, to another AI teammate by name, privately: the room "
                "does not see it. They answer in this thread or hand back to you. Use it for work that "
                "is theirs.",
                SendToAgent,
                self._hand_off,
            ),
            Tool(
                MESSAGE_OWNER,
                "Send your owners a private direct message (the room never sees it): for something only "
                "they should know or decide. At most once a turn.",
                MessageOwner,
                self._tell_owners,
            ),
            Tool(
                REACT,
                "Add an emoji reaction to the message you are answering (posts nothing, wakes nobody): "
                "to acknowledge without a reply, or alongside one.",
                React,
                self._react,
            ),
            Tool(
                SEND_FILE,
                "Post a text file you wrote (a report, a CSV, a patch; at most 1 MB) into this thread, "
                "with an optional title and comment. It counts as one of your posts this turn.",
                SendFile,
                self._send_file,
            ),
        ]

    async def _post(self, args: SendMessage) -> ToolResult:
        return self._send_message(args.text)

    async def _read(self, args: ReadSkill) -> ToolResult:
        return self._read_skill(args.name)

    async def _hand_off(self, args: SendToAgent) -> ToolResult:
        return self._send_to_agent(args.to, args.message, args.files)

    async def _tell_owners(self, args: MessageOwner) -> ToolResult:
        return self._message_owner(args.text)

    async def _react(self, args: React) -> ToolResult:
        return self._add_reaction(args.emoji)

    def _add_reaction(self, emoji: str) -> ToolResult:
        name = emoji.strip().strip(":").lower()
        if self._ctx.react_to is None:
            return ToolResult("not reacted: this turn answers no Slack message", is_error=True)
        if not _EMOJI_NAME.fullmatch(name):
            return ToolResult(
                f"not reacted: {emoji!r} is not an emoji name (as Slack names it: thumbsup, eyes, tada)",
                is_error=True,
            )
        if name in self.effects.reactions:
            return ToolResult(f"already reacted :{name}:")
        if len(self.effects.reactions) >= MAX_REACTIONS:
            return ToolResult(f"not reacted: a turn adds at most {MAX_REACTIONS} reactions", is_error=True)
        self.effects.reactions.append(name)
        return ToolResult(f"reacted :{name}:")

    async def _send_file(self, args: SendFile) -> ToolResult:
        refusal = self._file_refusal(args.filename, args.content)
        if refusal is not None:
            return ToolResult(f"not sent: {refusal}", is_error=True)
        name = args.filename.strip()
        title = " ".join(args.title.split()) or name
        self.effects.files.append(FileOut(name, title, args.content, args.comment.strip()))
        size = len(args.content.encode("utf-8"))
        return ToolResult(f"sent {name} ({size} bytes) into the thread")

    def _file_refusal(self, filename: str, content: str) -> str | None:
        name = filename.strip()
        if self._ctx.asked_by:
            return f"you are answering {self._ctx.asked_by}'s question, which posts nothing; answer in text"
        if self._ctx.sourced:
            return "this turn has no thread to send a file into (a routine's turn posts text only)"
        if not name or not _FILENAME.fullmatch(name) or name in (".", ".."):
            return f"{filename!r} is not a file name (one like report.md: no slashes, no control characters)"
        if len(name) > MAX_FILENAME_CHARS:
            return f"the file name is longer than {MAX_FILENAME_CHARS} characters"
        if not content:
            return "the content is empty"
        size = len(content.encode("utf-8"))
        if size > MAX_FILE_BYTES:
            return f"the content is {size} bytes, more than the {MAX_FILE_BYTES} (1 MB) a file may be"
        if self._posts_made() >= MAX_POSTS:
            return f"a turn posts at most {MAX_POSTS} messages, files included"
        return None

    def _posts_made(self) -> int:
        """What the turn has posted so far: its messages and its files."""
        return len(self.effects.posts) + len(self.effects.files)

    def _send_message(self, text: str) -> ToolResult:
        if not text.strip():
            return ToolResult("nothing posted: the text is empty", is_error=True)
        if self._posts_made() >= MAX_POSTS:
            return ToolResult(f"not posted: a turn posts at most {MAX_POSTS} messages", is_error=True)
        self.effects.posts.append(text.strip())
        if self._ctx.asked_by:
            return ToolResult(f"sent to {self._ctx.asked_by} as your answer")
        return ToolResult("posted")

    def _read_skill(self, name: str) -> ToolResult:
        known = list_skills(self._ctx.skills_dir)
        name = name.strip().removesuffix(".md")
        if _SKILL_NAME.fullmatch(name) and name in known:
            try:
                return ToolResult((self._ctx.skills_dir / f"{name}.md").read_text(encoding="utf-8"))
            except OSError as exc:
                return ToolResult(f"skill {name!r} cannot be read ({exc.strerror or exc})", is_error=True)
        listed = ", ".join(known) or "none"
        return ToolResult(f"no skill named {name!r}; the skills are: {listed}", is_error=True)

    def _send_to_agent(self, to: str, message: str, files: Sequence[str] = ()) -> ToolResult:
        me, to = self._ctx.instance, to.strip().lstrip("@").lower()
        names = file_names(files)
        refusal = self._handoff_refusal(me, to, message) or self._files_refusal(names)
        if refusal is not None:
            return ToolResult(refusal, is_error=True)
        passed = files_named(names, self._ctx.files_seen)
        self.effects.handoffs.append(Handoff(to, message.strip(), tracing.traceparent(), passed))
        with_files = f" with {', '.join(names)}" if names else ""
        if self._ctx.sourced:  # the run's post is not in Slack yet: the answer goes under it
            return ToolResult(f"handed to {to}{with_files}: they answer in the thread of this run's post")
        return ToolResult(f"handed to {to}{with_files}: they answer in this thread (or hand back to you)")

    def _files_refusal(self, names: Sequence[str]) -> str | None:
        """Only a file the turn was shown may be passed on (docs/agents.md ``send_to_agent``)."""
        return passed_files_refusal(names, self._ctx.files_seen, verb="sent", what="a handoff")

    def _handoff_refusal(self, me: str, to: str, message: str) -> str | None:
        if not to:
            return "not sent: name the teammate (to)"
        if to == me:
            return "not sent: you cannot hand off to yourself"
        fleet = self._ctx.fleet
        if fleet is not None and to not in fleet:
            return unknown_teammate(to, tuple(n for n in fleet if self._ctx.may_hand_off(me, n)))
        if not message.strip():
            return "not sent: the message is empty"
        if self._ctx.asked_by:
            return (
                f"not sent: you are answering {self._ctx.asked_by}'s question, which posts nothing; "
                "answer them with send_message (ask_agent to consult a teammate)"
            )
        if self._ctx.is_dm:
            return (
                "not sent: send_to_agent works in a group conversation, not in a direct message; "
                "to ask a teammate and wait for the answer here, use ask_agent"
            )
        if self._ctx.handoff_depth >= MAX_RELAY_DEPTH:
            return (
                f"not sent: this turn answers a relay of {self._ctx.handoff_depth} handoffs, the most there "
                "can be; answer in the thread with send_message instead"
            )
        if not self._ctx.may_hand_off(me, to):
            return f"not sent: {me} may not hand off to {to} (NANOSLACK_A2A_ALLOW does not list {me}>{to})"
        if len(self.effects.handoffs) >= MAX_HANDOFFS:
            return f"not sent: a turn hands off at most {MAX_HANDOFFS} times"
        return None

    def _message_owner(self, text: str) -> ToolResult:
        if self._ctx.asked_by:
            return ToolResult(
                f"not sent: you are answering {self._ctx.asked_by}'s question, which posts nothing", True
            )
        if not self._ctx.owners:
            return ToolResult("not sent: no owner is configured (SLACK_OWNER)", is_error=True)
        if self.effects.owner_messages:
            return ToolResult("not sent: you already messaged the owners this turn", is_error=True)
        if not text.strip():
            return ToolResult("not sent: the text is empty", is_error=True)
        self.effects.owner_messages.append(text.strip())
        return ToolResult("sent to the owners")


def file_names(files: Sequence[str]) -> tuple[str, ...]:
    """The file names a handoff or an ask was given, stripped, each once, in order."""
    return tuple(dict.fromkeys(f.strip() for f in files if f.strip()))


def files_named(names: Sequence[str], seen: Sequence[SeenFile]) -> tuple[SeenFile, ...]:
    """The files the turn saw, by the names it passes on (``passed_files_refusal`` let them)."""
    return tuple(next(f for f in seen if f.name == name) for name in names)


def passed_files_refusal(
    names: Sequence[str], seen: Sequence[SeenFile], *, verb: str, what: str
) -> str | None:
    """Why the files ``names`` may not be passed on to a teammate (None: they may): too many,
    or a name the turn was not shown (the refusal lists the names it was). ``verb``: "sent"
    or "asked"; ``what``: "a handoff" or "an ask"."""
    if len(names) > MAX_PASSED_FILES:
        return f"not {verb}: at most {MAX_PASSED_FILES} files {what}"
    shown = {f.name for f in seen}
    unseen = [name for name in names if name not in shown]
    if unseen:
        listed = ", ".join(sorted(shown)) or "none"
        return f"not {verb}: you were shown no file named {unseen[0]!r}; the files you saw: {listed}"
    return None


def unknown_teammate(to: str, teammates: tuple[str, ...]) -> str:
    """A name no configured instance has: a handoff (or an ask) to it would never be answered."""
    reach = ", ".join(teammates) if teammates else "none (NANOSLACK_A2A_ALLOW lists no pair from you)"
    return f"not sent: no teammate is named {to}; the teammates you may reach: {reach}"


def react_target(msgs: Sequence[MessageRow]) -> tuple[str, str] | None:
    """(channel, ts) of the newest Slack message among those a turn answers, where ``react``
    puts its reaction; None when there is none (a handoff or a round's brief: the fleet wrote
    it, Slack never had it)."""
    slack = [m for m in msgs if m.handoff_depth == 0 and m.sender_id != FLEET_SENDER]
    if not slack:
        return None
    newest = max(slack, key=lambda m: float(m.ts))
    return newest.channel, newest.ts
