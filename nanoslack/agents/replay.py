"""An LLM agent's earlier turns as model messages, and its new turn as the record kept
for the next ones (docs/memory.md), in pydantic-ai's own serialisation.

``replay`` gives the message history a turn starts from: each earlier turn's messages
exactly as they were (so the request's beginning is the previous request, byte for byte,
and a provider's prompt cache hits), the first turn always, a line for the turns left out
after it. ``keep`` writes a turn's new messages, tool results cut to
``KEPT_RESULT_CHARS`` and without the instructions (the opening) every request carries:
the kept copy is what later turns read again and again.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Sequence
from typing import Any, cast

from pydantic import ValidationError
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolReturnPart,
    UserPromptPart,
)

from nanoslack.agents.prompt import EARLIER_TURNS_NOT_SHOWN
from nanoslack.agents.types import PastTurn, Turn
from nanoslack.logs import get_logger

log = get_logger("nanoslack.agents")

KEPT_RESULT_CHARS = 2_000
CUT_NOTE = "… [cut in the kept copy]"
# What the kept copy says in place of an image a turn was shown: later turns see its
# ``[file: …]`` line in the prompt, never the image again (docs/agents.md "Files").
IMAGE_NOT_KEPT = "[image {name}: shown to that turn only]"
_IMAGE_ID_PREFIX = "file:"


def image_id(name: str) -> str:
    """The identifier an image of a turn's files is sent with (named again in the kept copy)."""
    return f"{_IMAGE_ID_PREFIX}{name}"


def replay(turn: Turn) -> list[ModelMessage]:
    messages: list[ModelMessage] = []
    for i, past in enumerate(turn.history):
        messages.extend(_past(turn, past))
        if i == 0 and turn.history_not_shown:
            note = EARLIER_TURNS_NOT_SHOWN.format(n=turn.history_not_shown)
            messages.append(ModelRequest(parts=[UserPromptPart(note)]))
    return messages


@functools.lru_cache(maxsize=4096)
def _parsed(raw: str) -> tuple[ModelMessage, ...]:
    """A kept turn never changes: each is parsed once per process, not at every later
    turn of its thread (the parse grew with the thread; it was most of a turn's history cost)."""
    return tuple(ModelMessagesTypeAdapter.validate_json(raw))


def _past(turn: Turn, past: PastTurn) -> list[ModelMessage]:
    if past.messages:
        try:
            # Copies: pydantic-ai may update a request of the history it is given.
            return [copy.copy(m) for m in _parsed(past.messages)]
        except (ValidationError, ValueError) as exc:
            log.warning(
                "agent history unreadable",
                instance=turn.instance,
                channel=turn.channel,
                thread=turn.thread_ts,
                error=type(exc).__name__,
            )
            return []
    # A turn without a model's record (it failed, or another back end ran it): what it
    # was shown, and what it posted.
    shown: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart(past.prompt)])]
    if past.posts:
        posted = "\n".join(f"(posted) {post}" for post in past.posts)
        shown.append(ModelResponse(parts=[TextPart(posted)]))
    return shown


def keep(messages: Sequence[ModelMessage]) -> str:
    """The JSON kept for later turns: the messages as they were, long results cut."""
    return ModelMessagesTypeAdapter.dump_json([_cut(m) for m in messages]).decode()


def _cut(message: ModelMessage) -> ModelMessage:
    if not isinstance(message, ModelRequest):
        return message
    parts = [_cut_part(part) for part in message.parts]
    # Without the instructions each request carries: a request is sent with the current
    # ones (the thread's opening), and a copy in every kept request would double its size.
    return dataclasses.replace(message, parts=parts, instructions=None)


def _cut_part(part: ModelRequestPart) -> ModelRequestPart:
    content = getattr(part, "content", None)
    if isinstance(part, UserPromptPart) and not isinstance(content, str | None):
        return dataclasses.replace(part, content=[_without_image(c) for c in part.content])
    if isinstance(part, ToolReturnPart | RetryPromptPart) and isinstance(content, str):
        if len(content) > KEPT_RESULT_CHARS:
            cut: Any = dataclasses.replace(cast(Any, part), content=content[:KEPT_RESULT_CHARS] + CUT_NOTE)
            return cast(ModelRequestPart, cut)
    return part


def _without_image(content: Any) -> Any:
    if isinstance(content, BinaryContent) and content.is_image:
        return IMAGE_NOT_KEPT.format(name=content.identifier.removeprefix(_IMAGE_ID_PREFIX))
    return content


def size(messages: Sequence[ModelMessage]) -> int:
    """Characters a turn's messages cost the history bound: the text the model reads
    (prompts, answers, tool calls' arguments and results), not the JSON around it."""
    total = 0
    for message in messages:
        for part in message.parts:
            content = getattr(part, "content", None)
            if isinstance(content, str):
                total += len(content)
            elif isinstance(part, UserPromptPart) and content is not None:
                # Images cost the kept copy their line only (``keep`` drops them).
                total += sum(len(c) if isinstance(c, str) else len(IMAGE_NOT_KEPT) for c in part.content)
            elif content is not None:
                total += len(str(content))
            args = getattr(part, "args", None)
            if args is not None:
                total += len(args) if isinstance(args, str) else len(str(args))
    return total
