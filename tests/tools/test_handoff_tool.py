"""``send_to_agent``'s files (docs/agents.md): a handoff passes on files the turn saw, by
name; a name it was not shown, or more than a handoff may carry, is refused saying why and
hands nothing off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nanoslack.agents import SeenFile, ToolResult
from nanoslack.tools.host import MAX_PASSED_FILES, SEND_TO_AGENT, HostContext, HostTools, TurnEffects

SHOT = SeenFile("F1", "shot.png", "image/png", 10, "image", "[file: shot.png (10 B)] an image", "/x/F1")
PLAN = SeenFile("F2", "plan.txt", "text/plain", 5, "text", "[file: plan.txt (5 B)]\nship", "/x/F2")


def _host(seen: tuple[SeenFile, ...]) -> HostTools:
    context = HostContext(
        instance="dana",
        skills_dir=Path("/nonexistent"),
        owners=(),
        is_dm=False,
        handoff_depth=0,
        may_hand_off=lambda _sender, _recipient: True,
        fleet=("dana", "eli"),
        files_seen=seen,
    )
    return HostTools(context, TurnEffects())


async def _hand(host: HostTools, **args: Any) -> ToolResult:
    (tool,) = [t for t in host.tools() if t.name == SEND_TO_AGENT]
    return await tool.call({"to": "eli", "message": "look", **args})


async def test_a_handoff_carries_the_files_it_names_as_the_turn_saw_them_once_each() -> None:
    host = _host((SHOT, PLAN))
    result = await _hand(host, files=["plan.txt", " plan.txt", "shot.png"])
    assert result.text.startswith("handed to eli with plan.txt, shot.png")
    (handoff,) = host.effects.handoffs
    assert handoff.files == (PLAN, SHOT)


async def test_a_file_the_turn_was_not_shown_is_refused_with_the_names_it_was() -> None:
    host = _host((SHOT, PLAN))
    result = await _hand(host, files=["shot.png", "secret.png"])
    assert result == ToolResult(
        "not sent: you were shown no file named 'secret.png'; the files you saw: plan.txt, shot.png", True
    )
    assert host.effects.handoffs == []
    nothing = await _hand(_host(()), files=["shot.png"])
    assert nothing.text.endswith("the files you saw: none")


async def test_more_files_than_a_handoff_carries_are_refused() -> None:
    seen = tuple(SeenFile(f"F{i}", f"f{i}.txt", "text/plain", 1, "text", "x") for i in range(12))
    host = _host(seen)
    result = await _hand(host, files=[f.name for f in seen])
    assert result == ToolResult(f"not sent: at most {MAX_PASSED_FILES} files a handoff", True)
    assert host.effects.handoffs == []
