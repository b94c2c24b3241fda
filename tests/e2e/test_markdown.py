"""An agent's Markdown reaches Slack as Markdown Slack renders (docs/architecture.md, docs/agents.md):
a room reply is posted as ``markdown_text``, never as raw Markdown in ``text``."""

from __future__ import annotations

import shlex

from tests.e2e.conftest import FleetFactory, Room

REPORT = """**Build report** for the week

- tests: all green
- lint: 2 warnings
- deploy: *pending*

```python
def ship(version: str) -> None:
    print(f"shipping {version}")
```

| service | status |
|---------|--------|
| api     | up     |
| worker  | down   |
"""


async def test_a_room_reply_with_bold_a_list_a_code_block_and_a_table_is_posted_as_markdown_text(
    room: Room, fleet_factory: FleetFactory
) -> None:
    answer = room.tmp / "report.md"
    answer.write_text(REPORT)
    await fleet_factory(
        ["dana"], SLACK_OWNER=room.human.id, NANOSLACK_AGENT_COMMAND=f"cat {shlex.quote(str(answer))}"
    )
    ts = await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} how was the week?")
    bot_id = room.apps["dana"].bot_id
    await room.emu.wait_for(
        lambda: [m for m in room.emu.all_messages(room.channel) if m.get("bot_id") == bot_id],
        timeout=15,
        message="dana did not answer",
    )
    resp = await room.client("dana").conversations_replies(channel=room.channel, ts=ts)
    found = [m for m in resp["messages"] if m.get("bot_id") == bot_id]
    [reply] = found
    # As Slack keeps a markdown_text post in the emulator: its Markdown as sent, in one
    # markdown block (a post with ``text`` has no such block).
    assert reply["blocks"] == [{"type": "markdown", "text": REPORT.strip()}]
    assert reply["text"] == REPORT.strip()
