"""``send_file``'s refusals (docs/agents.md): each is the tool's result and says why; nothing
is queued for a refused file, and a file counts against the turn's posts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nanoslack.agents import ToolResult
from nanoslack.config import ToolSettings
from nanoslack.tools.host import MAX_FILE_BYTES, SEND_FILE, FileOut, HostContext, HostTools, TurnEffects


def _host(**ctx: Any) -> HostTools:
    context = HostContext(
        instance="dana",
        skills_dir=Path("/nonexistent"),
        owners=("U0OWNER",),
        is_dm=False,
        handoff_depth=0,
        may_hand_off=ToolSettings().may_hand_off,
        **ctx,
    )
    return HostTools(context, TurnEffects())


async def _send(host: HostTools, **args: str) -> ToolResult:
    (tool,) = [t for t in host.tools() if t.name == SEND_FILE]
    return await tool.call({"filename": "report.md", "content": "# Hi", **args})


async def test_a_file_is_queued_with_its_title_defaulting_to_its_name() -> None:
    host = _host()
    result = await _send(host, comment="  the report  ")
    assert result == ToolResult("sent report.md (4 bytes) into the thread")
    assert host.effects.files == [FileOut("report.md", "report.md", "# Hi", "the report")]


@pytest.mark.parametrize(
    ("ctx", "args", "why"),
    [
        ({}, {"filename": "../etc/passwd"}, "is not a file name"),
        ({}, {"filename": "a\\b.txt"}, "is not a file name"),
        ({}, {"filename": "bell\x07.txt"}, "is not a file name"),
        ({}, {"filename": "x" * 256}, "longer than 255 characters"),
        ({}, {"content": ""}, "the content is empty"),
        ({}, {"content": "é" * (MAX_FILE_BYTES // 2 + 1)}, f"more than the {MAX_FILE_BYTES} (1 MB)"),
        ({"sourced": True}, {}, "no thread to send a file into"),
        ({"asked_by": "eli"}, {}, "answering eli's question"),
    ],
)
async def test_a_refused_file_says_why_and_queues_nothing(
    ctx: dict[str, Any], args: dict[str, str], why: str
) -> None:
    host = _host(**ctx)
    result = await _send(host, **args)
    assert result.is_error and result.text.startswith("not sent: ") and why in result.text
    assert host.effects.files == []


async def test_files_and_messages_share_the_turns_three_posts() -> None:
    host = _host()
    (post,) = [t for t in host.tools() if t.name == "send_message"]
    assert not (await post.call({"text": "first"})).is_error
    assert not (await _send(host)).is_error
    assert not (await _send(host, filename="two.md")).is_error
    refused = await _send(host, filename="three.md")
    assert refused.is_error and "at most 3 messages, files included" in refused.text
    late = await post.call({"text": "one more"})
    assert late.is_error and len(host.effects.posts) + len(host.effects.files) == 3
