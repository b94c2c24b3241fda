"""The Slack app manifest of a fleet bot (docs/operations.md), rendered per instance name.

``manifests/fleet-bot.json`` is this manifest rendered for the placeholder name
``fleet-bot``, for operators who paste a file into https://api.slack.com/apps; a test
keeps the two identical. Render one per instance with
``python -m nanoslack.ops.manifest dana``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from nanoslack.config import INSTANCE_NAME_RE

PLACEHOLDER_NAME = "fleet-bot"

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
    # Files people share reach the turn; a turn's own files go into its thread (DESIGN §17,
    # docs/agents.md). Without files:read Slack's file host answers its sign-in page.
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
)

# Slack caps an app's display name at 35 characters.
MAX_APP_NAME = 35


def render_manifest(instance_name: str) -> dict[str, Any]:
    """The manifest for the Slack app behind instance ``instance_name``.

    Socket Mode and no request URLs: the fleet dials out, so it needs no public
    endpoint. Interactivity is on for the Allow / Deny buttons of sender approvals,
    which arrive over the same socket.
    """
    if not INSTANCE_NAME_RE.match(instance_name):
        raise ValueError(f"invalid instance name {instance_name!r}: expected [a-z0-9_-]+")
    if len(instance_name) > MAX_APP_NAME:
        raise ValueError(f"instance name {instance_name!r} is longer than Slack's {MAX_APP_NAME} characters")
    return {
        "_metadata": {"major_version": 1, "minor_version": 1},
        "display_information": {
            "name": instance_name,
            "description": f"nanoslack fleet bot '{instance_name}'",
        },
        "features": {
            "app_home": {
                "home_tab_enabled": False,
                "messages_tab_enabled": True,
                "messages_tab_read_only_enabled": False,
            },
            "bot_user": {"display_name": instance_name, "always_online": True},
            # The Agents & AI Apps feature: the assistant pane (its suggested prompts are
            # set per thread from the teammate's SOUL.md, docs/agent-surface.md).
            "assistant_view": {"assistant_description": f"nanoslack teammate '{instance_name}'"},
        },
        "oauth_config": {"scopes": {"bot": list(BOT_SCOPES)}},
        "settings": {
            "event_subscriptions": {"bot_events": list(BOT_EVENTS)},
            "interactivity": {"is_enabled": True},
            "org_deploy_enabled": False,
            "socket_mode_enabled": True,
            "token_rotation_enabled": False,
        },
    }


def dumps(manifest: dict[str, Any]) -> str:
    return json.dumps(manifest, indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="manifest",
        description="Print the Slack app manifest (JSON) of one fleet bot. After creating the app, "
        "create an app-level token with connections:write and install the app to the workspace.",
    )
    p.add_argument("instance", help="instance name ([a-z0-9_-]+), used as the app and bot user name")
    args = p.parse_args(argv)
    try:
        manifest = render_manifest(args.instance)
    except ValueError as e:
        print(f"manifest: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(dumps(manifest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
