"""The one list of the bot scopes and bot events a fleet bot's Slack app has (docs/operations.md).

Pure data, no import: ``nanoslack manifest`` (``manifests/fleet-bot.json``) asks Slack for
exactly these, ``doctor`` checks a token against them, and the emulator's apps have them by
default (the emulator may import this module; product code never imports the emulator).
"""

from __future__ import annotations

BOT_SCOPES: tuple[str, ...] = (
    "chat:write",
    "mpim:write",
    "mpim:read",
    "mpim:history",
    "im:write",
    "im:read",
    "im:history",
    "channels:history",
    "groups:history",
    "app_mentions:read",
    "users:read",
    # An owner's 🛑 reaction halts a room (docs/operations.md).
    "reactions:read",
    # The working reaction on the message a turn answers (docs/agents.md).
    "reactions:write",
    # The fleet reads back the metadata it writes (docs/operations.md): the post lookup after a
    # crash, the room intro's and the notices' markers. Without it Slack leaves it out.
    "metadata.message:read",
    # Slack's agent surface (docs/agent-surface.md): the assistant pane's title and
    # suggested prompts, and the status line and streamed replies in DMs. Turning on
    # the Agents & AI Apps feature (``assistant_view``) adds it.
    "assistant:write",
    # Reading the files people share and uploading into a thread (docs/emulator.md, *Files*).
    # Without files:read Slack's file host answers its sign-in page, not the file.
    "files:read",
    "files:write",
)
BOT_EVENTS: tuple[str, ...] = (
    "message.mpim",
    "message.im",
    "message.channels",
    # A room that is a private channel (a ``round`` or ``chain`` room often is): without it
    # the instance hears only the messages that mention it there.
    "message.groups",
    "app_mention",
    "reaction_added",
    # A person opens the instance's assistant pane / switches channels with it open.
    "assistant_thread_started",
    "assistant_thread_context_changed",
    # Slack's agent platform (docs/agent-surface.md): the Home and messages tabs, the context a person
    # views beside an agent_view app, and the Stop button of an agent session.
    "app_home_opened",
    "app_context_changed",
    "agent_session_stopped",
)
