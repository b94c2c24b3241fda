"""The Slack app manifest of a fleet bot (docs/operations.md), rendered per instance name.

``manifests/fleet-bot.json`` is this manifest rendered for the placeholder name
``fleet-bot``, for operators who paste a file into https://api.slack.com/apps; a test
keeps the two identical. Render one per instance with
``python -m nanoslack.ops.manifest dana``.

The app is an agent (``features.agent_view``, Slack's Agent messaging; docs/agent-surface.md):
its ``agent_description`` is the teammate's (``SOUL.md`` front matter ``description:``, else
``role:``), read from ``--teammates``, else the folder ``run`` uses (``NANOSLACK_TEAMMATES``
from the environment or ``.env``, relative to the ``.env``'s folder; default ``teammates``).
The Home tab is on: owners see and act on the instance there.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from nanoslack.agents.describe import default_description, teammate_description
from nanoslack.config import INSTANCE_NAME_RE, ConfigError, teammates_dir
from nanoslack.slack_app import BOT_EVENTS, BOT_SCOPES

PLACEHOLDER_NAME = "fleet-bot"
# The scopes and events are nanoslack/slack_app.py's (one list: the emulator's defaults too).
__all__ = ["BOT_EVENTS", "BOT_SCOPES", "PLACEHOLDER_NAME", "dumps", "main", "render_manifest"]

# Slack caps an app's display name at 35 characters.
MAX_APP_NAME = 35


def render_manifest(instance_name: str, description: str | None = None) -> dict[str, Any]:
    """The manifest for the Slack app behind instance ``instance_name``; ``description``
    is the teammate's (its default when None).

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
                # The owner's Home (docs/agent-surface.md): rooms, approvals, spend, routines.
                "home_tab_enabled": True,
                "messages_tab_enabled": True,
                "messages_tab_read_only_enabled": False,
            },
            "bot_user": {"display_name": instance_name, "always_online": True},
            # Slack's Agent messaging (docs/agent-surface.md): the DM is the agent's Messages
            # tab; its suggested prompts are set from the teammate's SOUL.md when it opens.
            # Slack is retiring ``assistant_view`` (apps made with it keep being served).
            "agent_view": {"agent_description": description or default_description(instance_name)},
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
    p.add_argument(
        "--teammates",
        type=Path,
        default=None,
        help="the teammates folder: the agent's description is its SOUL.md's "
        "(default: NANOSLACK_TEAMMATES from the environment or .env, as run reads it)",
    )
    p.add_argument("--env-file", type=Path, default=None, help="read this file instead of ./.env")
    args = p.parse_args(argv)
    try:
        # Read only for a valid name: the name is a path under the teammates folder.
        valid = INSTANCE_NAME_RE.match(args.instance)
        description = _description(args) if valid else None
        manifest = render_manifest(args.instance, description)
    except (ValueError, ConfigError) as e:
        print(f"manifest: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(dumps(manifest))
    return 0


def _description(args: argparse.Namespace) -> str:
    # The folder the fleet reads the teammate from, so the app describes the agent that runs.
    folder: Path = args.teammates or teammates_dir(args.env_file)
    return teammate_description(folder, args.instance)


if __name__ == "__main__":
    sys.exit(main())
