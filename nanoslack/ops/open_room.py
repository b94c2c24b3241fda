"""``open-a2a-room``: open a Slack group DM for a human and several fleet bots (docs/operations.md).

The first instance opens the conversation with ``conversations.open`` (the human and
the other bots' user ids, learnt through ``auth.test`` per token), posts an intro that
mentions everyone, prints the channel id and lists it in ``SLACK_A2A_ROOMS`` in
``.env`` so the fleet admits bot messages there (it re-reads the key within
``SLACK_A2A_CONFIG_TTL`` seconds, no restart).

Tokens come from the environment and ``.env``; they are never printed, not even in a
traceback: every error is caught and formatted here, with any token value redacted.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import urllib.error
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dotenv import dotenv_values
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler
from slack_sdk.web import SlackResponse

from nanoslack.config import INSTANCE_NAME_RE, bot_token_key, database_url
from nanoslack.ops.envfile import append_to_list, list_items
from nanoslack.slack.parse import ROOM_INTRO_EVENT_TYPE

PROG = "open-a2a-room"
DEFAULT_API_URL = "https://slack.com/api/"
ROOMS_KEY = "SLACK_A2A_ROOMS"
USER_ID_RE = re.compile(r"^[UW][A-Z0-9]+$")
# conversations.open takes at most 8 users, the caller not counted.
MAX_OTHER_MEMBERS = 8
HTTP_TIMEOUT_S = 30


class OpenRoomError(Exception):
    """A failure reported to the operator as one ``open-a2a-room: …`` line, exit 1."""


ROOM_KINDS = ("mention", "round", "chain")


@dataclass(frozen=True)
class Request:
    instances: list[str]
    user: str | None
    env_file: Path
    api_url: str | None
    public: bool
    # docs/team-rooms.md: how the room works; None leaves what the store says (mention when nothing).
    kind: str | None = None
    lead: str | None = None
    mission: str | None = None

    @property
    def sets_kind(self) -> bool:
        return self.kind is not None or self.lead is not None or self.mission is not None


@dataclass(frozen=True)
class Identity:
    name: str
    user_id: str
    bot_id: str | None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Open a Slack group DM (A2A room) holding a human and fleet bots, "
        "post an intro, print its id and add it to SLACK_A2A_ROOMS in .env.",
    )
    # Not required=True: a missing --instances is the same mistake as too few
    # instances and gets the same exit-1 message.
    p.add_argument("--instances", default="", help="comma list of instance names; the first opens the room")
    p.add_argument("--user", help="Slack user id (U…/W…) of the human to include")
    p.add_argument("--env-file", default=".env", type=Path, help="the .env to read tokens from and edit")
    p.add_argument("--api-url", help="Slack Web API base URL (default: SLACK_API_URL or Slack)")
    p.add_argument(
        "--public",
        action="store_true",
        help="also create each instance's messaging group for the room with unknown_sender_policy='public'",
    )
    p.add_argument(
        "--kind",
        choices=ROOM_KINDS,
        help="how the room works: mention (default), round (every bot answers, the chief closes) "
        "or chain (a lead gives directives); re-running changes it",
    )
    p.add_argument("--lead", help="chain rooms: the instance that gives directives")
    p.add_argument("--mission", help="what the room is for: shown to the agents in every turn")
    return p


def parse_instances(raw: str) -> list[str]:
    names = [n.strip() for n in raw.split(",") if n.strip()]
    for name in names:
        if not INSTANCE_NAME_RE.match(name):
            raise OpenRoomError(f"invalid instance name {name!r}: expected [a-z0-9_-]+")
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise OpenRoomError(f"instance {name!r} is listed twice")
        seen.add(name)
    return names


def validate(instances: Sequence[str], user: str | None) -> None:
    if len(instances) < 2:
        raise OpenRoomError("need at least 2 instances (--instances dana,eli)")
    if user is not None and not USER_ID_RE.match(user):
        raise OpenRoomError(f"--user {user!r} is not a Slack user id (expected ^[UW][A-Z0-9]+$)")
    if user is None and len(instances) < 3:
        # Slack turns a two-party conversations.open into a 1:1 IM, and a bot cannot
        # IM another bot (cannot_dm_bot): a bots-only room needs three bots.
        raise OpenRoomError(
            "without --user a room needs at least 3 instances (two bots alone cannot share a DM)"
        )
    others = len(instances) - 1 + (1 if user else 0)
    if others > MAX_OTHER_MEMBERS:
        raise OpenRoomError(
            f"too many members: conversations.open takes at most {MAX_OTHER_MEMBERS} users besides the opener"
        )


def parse_request(argv: Sequence[str] | None) -> Request:
    args = build_parser().parse_args(argv)
    instances = parse_instances(args.instances)
    validate(instances, args.user)
    validate_kind(args.kind, args.lead, instances)
    return Request(
        instances=instances,
        user=args.user,
        env_file=args.env_file,
        api_url=args.api_url,
        public=args.public,
        kind=args.kind,
        lead=args.lead,
        mission=args.mission.strip() if args.mission else None,
    )


def validate_kind(kind: str | None, lead: str | None, instances: Sequence[str]) -> None:
    if kind == "chain" and not lead:
        raise OpenRoomError("--kind chain needs --lead NAME (the instance that gives directives)")
    if lead and kind != "chain":
        raise OpenRoomError("--lead only applies to a chain room (--kind chain)")
    if lead and lead not in instances:
        raise OpenRoomError(f"--lead {lead!r} is not one of --instances ({', '.join(instances)})")


def load_env(env_file: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """``.env`` values overlaid with the real environment (which wins, docs/configuration.md)."""
    values: dict[str, str] = {}
    if env_file.is_file():
        try:
            parsed = dotenv_values(env_file)
        except (OSError, UnicodeDecodeError) as e:
            raise OpenRoomError(f"cannot read {env_file}: {e}") from None
        # A bare `KEY` line parses as None: unset.
        values.update({k: v for k, v in parsed.items() if v is not None})
    values.update(environ)
    return values


def resolve_tokens(instances: Sequence[str], env: Mapping[str, str], env_file: Path) -> dict[str, str]:
    tokens: dict[str, str] = {}
    for name in instances:
        key = bot_token_key(name)
        token = env.get(key, "").strip()
        if not token:
            raise OpenRoomError(
                f"missing token for instance {name!r}: set {key} in the environment or {env_file}"
            )
        tokens[name] = token
    return tokens


def api_base_url(req: Request, env: Mapping[str, str]) -> str:
    url = (req.api_url or env.get("SLACK_API_URL") or DEFAULT_API_URL).strip()
    # slack_sdk joins with urljoin: without the trailing slash ".../api" + "auth.test"
    # would become ".../auth.test".
    return url if url.endswith("/") else url + "/"


def intro_text(human: str | None, bots: Sequence[Identity], req: Request | None = None) -> str:
    bot_list = ", ".join(f"<@{b.user_id}> ({b.name})" for b in bots)
    greeting = (
        f"Welcome <@{human}>! This room is shared with {bot_list}."
        if human
        else (f"This room is shared by {bot_list}.")
    )
    example = bots[1] if len(bots) > 1 else bots[0]
    kind = req.kind if req else None
    mission = f"The room's mission: {req.mission}\n" if req and req.mission else ""
    if kind == "round":
        how = (
            "• It is a round room: ask a question that names no bot and every bot answers it at once, "
            "each for its own patch; then the chief closes with a dispatch. "
            f"Mention bots (like <@{example.user_id}>) to ask only them.\n"
            "• One question at a time: a second one waits until the round has closed.\n"
        )
    elif kind == "chain":
        lead = next((b for b in bots if b.name == req.lead), bots[0]) if req else bots[0]
        how = (
            f"• It is a chain room led by <@{lead.user_id}>: the lead gives directives, "
            "the others do the work and report back.\n"
        )
    else:
        how = (
            f"• It is mention-driven: mention a bot (like <@{example.user_id}>) to get its answer. "
            "Bots that are not mentioned stay quiet; a mentioned bot keeps following that thread.\n"
            "• Bots can hand a question to each other by mentioning one another.\n"
        )
    return (
        f":wave: {greeting}\n"
        f"{mission}"
        "How it works:\n"
        f"{how}"
        "• To stop endless loops, the bots pause after too many consecutive bot messages "
        "until a human speaks again."
    )


def intro_metadata(human: str | None, bots: Sequence[Identity]) -> dict[str, Any]:
    """Slack message metadata marking the intro, so the fleet keeps it as room context
    instead of taking its mentions as a conversation every bot must answer."""
    # Plain strings: the value types every metadata schema accepts.
    payload = {"opener": bots[0].name, "instances": ",".join(b.name for b in bots)}
    if human:
        payload["human"] = human
    return {"event_type": ROOM_INTRO_EVENT_TYPE, "event_payload": payload}


class Slack:
    """The few Web API calls the tool makes, with errors turned into one-line messages."""

    def __init__(self, api_url: str) -> None:
        self.api_url = api_url

    def client(self, token: str) -> WebClient:
        return WebClient(
            token=token,
            base_url=self.api_url,
            timeout=HTTP_TIMEOUT_S,
            retry_handlers=[RateLimitErrorRetryHandler(max_retry_count=3)],
        )

    def call(self, method: str, send: Callable[[], SlackResponse]) -> dict[str, Any]:
        try:
            data = send().data
        except SlackApiError as e:
            body = e.response.data if isinstance(e.response.data, dict) else {}
            error = body.get("error") or f"HTTP {e.response.status_code}"
            raise OpenRoomError(f"{method} failed: {error}") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", None) or e
            raise OpenRoomError(
                f"{method} failed: cannot reach the Slack API at {self.api_url}: {reason}"
            ) from None
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise OpenRoomError(f"{method} failed: the Slack API at {self.api_url} did not answer with JSON")
        return data


def make_room_public(
    channel_id: str, instance_names: Sequence[str], env: Mapping[str, str], *, base_dir: Path | None = None
) -> None:
    """``--public``: create each instance's messaging group for the room with
    ``unknown_sender_policy='public'``, so sibling bots pass the sender gate with no
    further step (the alternative is the seed's ``scripts/q.py`` UPDATE).
    """
    # Lazy: the store pulls in SQLAlchemy and creates/migrates the schema; a plain
    # room opening needs none of it.
    from nanoslack.store import Store

    with Store.open(database_url(env, base_dir or Path.cwd())) as store:
        for name in instance_names:
            store.groups.ensure_public_room(platform_id=f"slack:{channel_id}", instance=name)


def set_room_kind(
    channel_id: str,
    req: Request,
    env: Mapping[str, str],
    *,
    bots: Sequence[Identity] = (),
    base_dir: Path | None = None,
) -> None:
    """``--kind``/``--lead``/``--mission``: the room's ``a2a_rooms`` row (re-running changes it)."""
    from nanoslack.store import Store

    with Store.open(database_url(env, base_dir or Path.cwd())) as store:
        store.room_kinds.set(
            channel_id,
            kind=req.kind or "mention",
            lead=req.lead,
            mission=req.mission,
            members=tuple(req.instances),
            member_users=tuple(b.user_id for b in bots) if bots else None,
        )


def open_room(req: Request, env: Mapping[str, str], log: Any = None) -> str:
    """Open the room, post the intro and list it in ``.env``; returns the channel id."""

    def info(msg: str) -> None:
        if log is not None:
            print(msg, file=log)

    tokens = resolve_tokens(req.instances, env, req.env_file)
    slack = Slack(api_base_url(req, env))
    clients = {name: slack.client(tokens[name]) for name in req.instances}

    bots: list[Identity] = []
    for name in req.instances:
        auth = slack.call("auth.test", clients[name].auth_test)
        user_id = auth.get("user_id")
        if not isinstance(user_id, str) or not user_id:
            raise OpenRoomError(f"auth.test failed: no user_id for instance {name!r}")
        bot_id = auth.get("bot_id")
        if not bot_id:
            raise OpenRoomError(
                f"instance {name!r}: its token is not a bot token (auth.test returned no bot_id)"
            )
        if any(b.user_id == user_id for b in bots):
            raise OpenRoomError(f"instance {name!r} has the same bot user as another instance ({user_id})")
        if user_id == req.user:
            raise OpenRoomError(f"--user {req.user} is the bot user of instance {name!r}, not a human")
        bots.append(Identity(name=name, user_id=user_id, bot_id=str(bot_id)))
        info(f"{name}: bot user {user_id}")

    opener, others = bots[0], bots[1:]
    invitees = ([req.user] if req.user else []) + [b.user_id for b in others]
    opener_client = clients[opener.name]
    opened = slack.call(
        "conversations.open", lambda: opener_client.conversations_open(users=",".join(invitees))
    )
    channel = opened.get("channel")
    channel_id = channel.get("id") if isinstance(channel, dict) else None
    if not isinstance(channel_id, str) or not channel_id:
        raise OpenRoomError("conversations.open failed: no channel id in the answer")
    info(f"{opener.name} opened {channel_id}")

    listed = channel_id in list_items(env.get(ROOMS_KEY, ""))
    if listed:
        # The same member set returns the existing conversation. It is already an A2A
        # room, so an intro mentioning every bot would be admitted and wake them all.
        info(f"{channel_id} is already in {ROOMS_KEY}: intro not posted again")
    else:
        # Posted before the room is listed, so the fleet drops this bot message rather
        # than waking every bot it mentions.
        text, metadata = intro_text(req.user, bots, req), intro_metadata(req.user, bots)
        slack.call(
            "chat.postMessage",
            lambda: opener_client.chat_postMessage(channel=channel_id, text=text, metadata=metadata),
        )
        info("intro posted")

    try:
        changed = append_to_list(req.env_file, ROOMS_KEY, channel_id)
    except OSError as e:
        raise OpenRoomError(f"cannot update {req.env_file}: {e.strerror or e}") from None
    state = "added to" if changed else "already in"
    info(f"{channel_id} {state} {ROOMS_KEY} in {req.env_file}")
    if ROOMS_KEY in os.environ:
        info(
            f"warning: {ROOMS_KEY} is set in the environment and overrides {req.env_file}: "
            f"add {channel_id} there"
        )

    if req.sets_kind:
        try:
            set_room_kind(channel_id, req, env, bots=bots, base_dir=req.env_file.parent)
        except Exception as e:  # the store's errors are not ours to know; report, not trace
            raise OpenRoomError(
                f"--kind failed (room {channel_id} is open and listed): {type(e).__name__}: {e}"
            ) from None
        info(f"{channel_id} is a {req.kind or 'mention'} room" + (f" led by {req.lead}" if req.lead else ""))

    if req.public:
        try:
            make_room_public(channel_id, req.instances, env, base_dir=req.env_file.parent)
        except Exception as e:  # the store's errors are not ours to know; report, not trace
            raise OpenRoomError(
                f"--public failed (room {channel_id} is open and listed): {type(e).__name__}: {e}"
            ) from None
        info(f"messaging groups for {channel_id} created as public")
    return channel_id


def redact(text: str, secrets: Sequence[str]) -> str:
    for secret in sorted(secrets, key=len, reverse=True):
        if secret:
            text = text.replace(secret, "[redacted]")
    return text


def _token_values(env: Mapping[str, str]) -> list[str]:
    # Wider than the bot tokens we read: an error may echo any credential it saw.
    secret_words = ("TOKEN", "SECRET", "API_KEY", "PASSWORD")
    return [v for k, v in env.items() if v and len(v) >= 8 and any(w in k.upper() for w in secret_words)]


def main(argv: list[str] | None = None) -> int:
    env: dict[str, str] = dict(os.environ)
    try:
        req = parse_request(argv)
        env = load_env(req.env_file, os.environ)
        channel_id = open_room(req, env, log=sys.stderr)
    except OpenRoomError as e:
        print(f"{PROG}: {redact(str(e), _token_values(env))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # never let a traceback (with locals or URLs) reach the terminal
        print(
            f"{PROG}: unexpected error: {type(e).__name__}: {redact(str(e), _token_values(env))}",
            file=sys.stderr,
        )
        return 1
    print(channel_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
