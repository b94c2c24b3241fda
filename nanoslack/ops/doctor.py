"""``nanoslack doctor``: check a configuration before the first run (docs/operations.md).

One line per check, ``✓`` or ``✗``, each failure naming the instance and what is wrong
and how to fix it; exit 1 when anything failed. Read-only: it opens no socket (a
Socket Mode connection would take envelopes from a fleet already running), posts
nothing and does not migrate the store. Tokens are never printed: the lines name the
keys that hold them, and every line goes through the log redactor as well.

What is checked, in order:

- every instance's tokens: ``auth.test`` (bot token), ``apps.connections.open``
  (app-level token), and that both belong to the same app (``bots.info`` against the
  ``app_id`` Slack puts in the Socket Mode URL);
- its bot scopes, from Slack's ``x-oauth-scopes`` header, against the manifest
  (``manifests/fleet-bot.json``, ``nanoslack.ops.manifest.BOT_SCOPES``);
- each ``SLACK_A2A_ROOMS`` room: every bot that should be there is a member
  (``conversations.members``). The bots a room should hold are those its intro
  (``open-room``'s, found by its metadata) names; a room without an intro should hold
  every instance of the fleet;
- ``SLACK_OWNER``: each id is a person of the workspace (``users.info``);
- each instance's back end is configured; with ``--agents`` it answers a tiny request
  too (LLM back ends: one real request, a few tokens; ``command``: the command runs once
  on a one-line prompt with ``NANOSLACK_DOCTOR=1`` set, so a program can tell; ``script``:
  its rules answer it);
- the store: reachable, and its schema this version's or older (the fleet migrates an
  older one at start); never written to;
- teammate folders (``SOUL.md`` readable) and the ``mcp.json`` files (docs/agents.md): JSON
  with an ``mcpServers`` object, each server a ``command`` or a ``url``, and every
  ``${VAR}`` it names set;
- every configuration value that does not parse: a ✗ naming the key, the value, what is
  expected and what the fleet would use instead (the words of ``run``'s warning);
- every ``routines.toml`` (docs/routines.md): each malformed routine a ✗ naming it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from nanoslack.config import ConfigError, Settings, app_token_key, bot_token_key, instance_key, load_settings
from nanoslack.config.agent import slack_view
from nanoslack.logs import configure_logging, redact_text
from nanoslack.ops.manifest import BOT_SCOPES

PROG = "nanoslack doctor"
HTTP_TIMEOUT_S = 15
AGENT_TIMEOUT_S = 60.0
MENTION_RE = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")
ENV_REF_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# How long after a room's creation its intro is looked for (open-room posts it at once).
INTRO_WINDOW_S = 3600
# What a missing scope costs, for the scopes whose loss is not obvious.
SCOPE_EFFECTS = {
    "metadata.message:read": (
        "without it Slack hides message metadata: the room intro and the fleet's notices look like "
        "ordinary bot messages, and a reply left in doubt by a crash may be posted twice"
    ),
    "reactions:read": "without it an owner's 🛑 reaction does not halt a room",
    "reactions:write": "without it the working reaction (NANOSLACK_WORKING_REACTION) is not shown",
    "users:read": "without it senders' names and the owners' check fail",
    "files:read": "without it files people share cannot be read: the agent sees only that a file was shared",
    "files:write": "without it an agent cannot post a file into the thread (send_file)",
    "assistant:write": (
        "without it Slack's agent surface is off: no assistant pane, and DMs get the working reaction"
        " and whole replies instead of a status line and streamed ones (turn on Agents & AI Apps in"
        " the app's settings and subscribe to assistant_thread_started and"
        " assistant_thread_context_changed)"
    ),
}
TOKEN_REVOKED = frozenset({"token_revoked", "account_inactive", "token_expired", "app_uninstalled"})


@dataclass(frozen=True)
class Check:
    ok: bool
    subject: str
    what: str
    fix: str = ""

    def line(self) -> str:
        mark = "✓" if self.ok else "✗"
        text = f"{mark} {self.subject}: {self.what}"
        if not self.ok and self.fix:
            text += f" — fix: {self.fix}"
        return redact_text(text)


@dataclass
class Bot:
    """One instance as Slack told us: who it is and a client that works."""

    name: str
    client: AsyncWebClient
    user_id: str
    bot_id: str
    scopes: frozenset[str] | None


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)

    def add(self, ok: bool, subject: str, what: str, fix: str = "") -> None:
        self.checks.append(Check(ok, subject, what, fix))

    @property
    def failed(self) -> int:
        return sum(1 for c in self.checks if not c.ok)


def _client(token: str, api_url: str) -> AsyncWebClient:
    return AsyncWebClient(
        token=token,
        base_url=api_url,
        timeout=HTTP_TIMEOUT_S,
        retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=2)],
    )


def _error(exc: Exception) -> str:
    if isinstance(exc, SlackApiError):
        data = exc.response.data
        error = data.get("error") if isinstance(data, dict) else None
        return str(error or f"HTTP {exc.response.status_code}")
    return type(exc).__name__


def _header(resp: AsyncSlackResponse, name: str) -> str | None:
    for key, value in (resp.headers or {}).items():
        if str(key).lower() == name:
            return str(value)
    return None


def _code(items: Iterable[str]) -> str:
    return ", ".join(f"`{item}`" for item in items)


# -- tokens and scopes ------------------------------------------------------------------------


def _bot_token_fix(name: str, error: str) -> str:
    key = bot_token_key(name)
    if error in TOKEN_REVOKED:
        return (
            f"{name}'s bot token was revoked: reinstall {name}'s app (OAuth & Permissions → "
            f"Reinstall to Workspace) and put the new xoxb-… token in {key}"
        )
    if error == "not_allowed_token_type":
        return f"{key} holds another kind of token: put {name}'s Bot User OAuth Token (xoxb-…) there"
    return f"{key} is not a working bot token: copy {name}'s Bot User OAuth Token (xoxb-…) into it"


def _app_token_fix(name: str, error: str) -> str:
    key = app_token_key(name)
    if error == "not_allowed_token_type":
        return f"{key} holds a bot token: put {name}'s app-level token (xapp-…) there"
    if error == "missing_scope":
        return f"{name}'s app-level token lacks `connections:write`: generate one with it for {key}"
    revoked = "was revoked" if error in TOKEN_REVOKED else "does not work"
    return (
        f"{name}'s app-level token {revoked}: generate a new one with `connections:write` "
        f"(Basic Information → App-Level Tokens) and put it in {key}"
    )


async def check_instance(settings: Settings, name: str, report: Report) -> Bot | None:
    inst = settings.instance(name)
    assert inst is not None
    client = _client(inst.bot_token.reveal(), settings.api_url)
    try:
        auth = await client.auth_test()
    except Exception as exc:
        error = _error(exc)
        report.add(False, name, f"bot token refused by auth.test: {error}", _bot_token_fix(name, error))
        await _check_app_token(settings, name, None, report)
        return None
    user_id, bot_id = str(auth.get("user_id") or ""), str(auth.get("bot_id") or "")
    report.add(
        True, name, f"bot token works (auth.test: user {user_id}, bot {bot_id}, team {auth.get('team_id')})"
    )
    raw = _header(auth, "x-oauth-scopes")
    scopes = frozenset(s.strip() for s in raw.split(",") if s.strip()) if raw is not None else None
    _check_scopes(name, scopes, report)
    app_id = await _app_id(client, bot_id)
    await _check_app_token(settings, name, app_id, report)
    return Bot(name, client, user_id, bot_id, scopes)


def _check_scopes(name: str, scopes: frozenset[str] | None, report: Report) -> None:
    manifest = f"see manifests/fleet-bot.json (`nanoslack manifest {name}`)"
    if scopes is None:
        report.add(False, name, "Slack did not say which scopes the bot token has (no x-oauth-scopes header)")
        return
    missing = [s for s in BOT_SCOPES if s not in scopes]
    if not missing:
        report.add(True, name, f"bot scopes: all {len(BOT_SCOPES)} the manifest asks for")
        return
    effects = "; ".join(SCOPE_EFFECTS[s] for s in missing if s in SCOPE_EFFECTS)
    report.add(
        False,
        name,
        f"bot scopes: missing {_code(missing)}" + (f" ({effects})" if effects else ""),
        f"add {_code(missing)} to {name}'s app: {manifest}; then reinstall the app",
    )


async def _app_id(client: AsyncWebClient, bot_id: str) -> str | None:
    try:
        resp = await client.bots_info(bot=bot_id)
    except Exception:
        return None  # only used to tell swapped app tokens apart
    bot = resp.get("bot") or {}
    return str(bot.get("app_id")) if bot.get("app_id") else None


async def _check_app_token(settings: Settings, name: str, app_id: str | None, report: Report) -> None:
    inst = settings.instance(name)
    assert inst is not None
    client = _client(inst.app_token.reveal(), settings.api_url)
    try:
        resp = await client.apps_connections_open(app_token=inst.app_token.reveal())
    except Exception as exc:
        error = _error(exc)
        report.add(
            False,
            name,
            f"app-level token refused by apps.connections.open: {error}",
            _app_token_fix(name, error),
        )
        return
    found = parse_qs(urlparse(str(resp.get("url") or "")).query).get("app_id") or []
    url_app = found[0] if found else None
    if app_id and url_app and url_app != app_id:
        report.add(
            False,
            name,
            f"{app_token_key(name)} belongs to app {url_app}, the bot token to app {app_id}",
            f"put the app-level token of {name}'s own app in {app_token_key(name)}",
        )
        return
    report.add(True, name, "app-level token opens Socket Mode (apps.connections.open)")


# -- rooms and owners -------------------------------------------------------------------------


async def _members(bot: Bot, room: str) -> list[str] | None:
    """The room's members as ``bot`` sees them; None when it is not in the room."""
    members: list[str] = []
    cursor: str | None = None
    try:
        while True:
            resp = await bot.client.conversations_members(channel=room, limit=200, cursor=cursor)
            members += [str(m) for m in resp.get("members") or []]
            cursor = (resp.get("response_metadata") or {}).get("next_cursor") or None
            if not cursor:
                return members
    except SlackApiError:
        return None


async def _room_info(bot: Bot, room: str) -> dict[str, Any]:
    try:
        resp = await bot.client.conversations_info(channel=room)
    except SlackApiError:
        return {}
    channel = resp.get("channel")
    return channel if isinstance(channel, dict) else {}


async def _intro_names(bot: Bot, room: str, created: float, bots: Sequence[Bot]) -> list[str] | None:
    """The fleet instances the room's intro names (its poster included); None when no
    intro is found (a room opened by hand, or metadata hidden from this bot)."""
    from nanoslack.slack.parse import ROOM_INTRO_EVENT_TYPE

    # No retry here: since 2025 Slack allows many apps one history call a minute, and a
    # doctor that waits a minute per room helps nobody (no intro found is the fallback).
    client = AsyncWebClient(token=bot.client.token, base_url=bot.client.base_url, timeout=HTTP_TIMEOUT_S)
    try:
        resp = await client.conversations_history(
            channel=room,
            oldest=f"{max(created - 1, 0):.6f}",
            latest=f"{created + INTRO_WINDOW_S:.6f}",
            inclusive=True,
            limit=15,
            include_all_metadata=True,
        )
    except SlackApiError:
        return None
    by_user = {b.user_id: b.name for b in bots}
    by_bot = {b.bot_id: b.name for b in bots}
    for message in resp.get("messages") or []:
        metadata = message.get("metadata") or {}
        if metadata.get("event_type") != ROOM_INTRO_EVENT_TYPE or message.get("bot_id") not in by_bot:
            continue
        named = [by_bot[message["bot_id"]]]
        named += [by_user[u] for u in MENTION_RE.findall(str(message.get("text") or "")) if u in by_user]
        return list(dict.fromkeys(named))
    return None


def _join_fix(name: str, room: str, info: Mapping[str, Any], everyone: Sequence[str]) -> str:
    if info.get("is_mpim") or info.get("is_im"):
        return (
            f"a group DM's members cannot change: open a room with every bot "
            f"(`nanoslack open-room --instances {','.join(everyone)} --user U…`) and list its id in "
            f"SLACK_A2A_ROOMS instead of {room}"
        )
    return f"invite {name} to the channel (`/invite @{name}` in {room})"


async def check_rooms(settings: Settings, bots: Sequence[Bot], report: Report) -> None:
    for room in sorted(settings.a2a.rooms):
        subject = f"room {room}"
        if not bots:
            report.add(False, subject, "cannot check: no instance's bot token works")
            continue
        seen = {b.name: await _members(b, room) for b in bots}
        seer = next((b for b in bots if seen[b.name] is not None), None)
        if seer is None:
            report.add(
                False,
                subject,
                "no bot of the fleet is in it (or it does not exist)",
                "check the id in SLACK_A2A_ROOMS, or open a room with "
                "`nanoslack open-room --instances NAME,NAME --user U…`",
            )
            continue
        members = set(seen[seer.name] or [])
        info = await _room_info(seer, room)
        named = await _intro_names(seer, room, float(info.get("created") or 0), bots)
        expected = named if named is not None else [b.name for b in bots]
        absent = [b for b in bots if b.name in expected and b.user_id not in members]
        why = "its intro names" if named is not None else "no intro found: every instance"
        for bot in absent:
            report.add(
                False,
                subject,
                f"{bot.name} is not a member ({why})",
                _join_fix(bot.name, room, info, expected),
            )
        if not absent:
            report.add(
                True, subject, f"every bot that should be there is a member: {', '.join(expected)} ({why})"
            )


async def check_owners(settings: Settings, bots: Sequence[Bot], report: Report) -> None:
    if not settings.owners:
        report.add(
            True, "SLACK_OWNER", "none set (approval requests are only logged; no one can halt a room)"
        )
        return
    fix = "use the person's member id (their Slack profile → ⋮ → Copy member ID) in SLACK_OWNER"
    for owner in settings.owners:
        subject = f"SLACK_OWNER {owner}"
        if not bots:
            report.add(False, subject, "cannot check: no instance's bot token works")
            continue
        try:
            resp = await bots[0].client.users_info(user=owner)
        except Exception as exc:
            report.add(False, subject, f"users.info: {_error(exc)}", fix)
            continue
        user = resp.get("user") or {}
        if user.get("is_bot"):
            report.add(False, subject, f"is a bot ({user.get('name')}), not a person", fix)
        elif user.get("deleted"):
            report.add(False, subject, f"{user.get('name')} is deactivated", fix)
        else:
            report.add(
                True, subject, f"{user.get('real_name') or user.get('name')} is a user of this workspace"
            )


# -- back ends ----------------------------------------------------------------------------------


def _tiny_turn(name: str) -> Any:
    from nanoslack.agents import Line, Turn

    text = "nanoslack doctor is checking that you answer: reply with one word."
    return Turn(
        instance=name,
        name=name,
        channel="D0DOCTOR",
        thread_ts="",
        sender_id="slack:U0DOCTOR",
        wrapping_up=False,
        room="DM",
        members=("doctor",),
        transcript=(Line(ts="1.000001", sender_id="slack:U0DOCTOR", sender_name="doctor", text=text),),
        system=f"You are {name}. This is a health check, not a conversation.",
    )


async def check_agents(settings: Settings, names: Sequence[str], report: Report, *, answer: bool) -> None:
    from nanoslack.agents import LocalTools, build_agent, make_http_client

    http = make_http_client()
    os.environ["NANOSLACK_DOCTOR"] = "1"  # what a command agent run by the doctor sees
    try:
        for name in names:
            key = instance_key("NANOSLACK_AGENT", name)
            try:
                agent = build_agent(settings.value, name, http=http, teammates_dir=settings.teammates_dir)
            except ConfigError as exc:
                report.add(
                    False,
                    name,
                    f"back end not configured: {exc}",
                    f"set it in the .env (see .env.example, {key})",
                )
                continue
            if not answer:
                report.add(True, name, f"back end {agent.name} configured")
                continue
            try:
                reply = await asyncio.wait_for(
                    agent.run(_tiny_turn(name), LocalTools(instance=name)), AGENT_TIMEOUT_S
                )
            except Exception as exc:
                why = str(exc) or type(exc).__name__
                report.add(
                    False, name, f"back end {agent.name} did not answer: {why}", f"check {key} and its keys"
                )
                continue
            report.add(True, name, f"back end {agent.name} answered ({len(reply.posts)} post(s))")
    finally:
        os.environ.pop("NANOSLACK_DOCTOR", None)
        await http.aclose()


# -- the store ----------------------------------------------------------------------------------


def check_store(settings: Settings, report: Report) -> None:
    from nanoslack.store.migrations import read_version

    url = settings.db_url
    subject = "store"
    try:
        if url.startswith("sqlite:///"):
            path = Path(url.removeprefix("sqlite:///"))
            shown = str(path)
            if not path.exists():
                _check_new_sqlite(path, report)
                return
            if not os.access(path, os.W_OK):
                report.add(
                    False, subject, f"{path} is read-only", f"make {path} writable for the fleet's user"
                )
                return
            version = read_version(url)
        else:
            from sqlalchemy.engine import make_url

            shown = make_url(url).render_as_string(hide_password=True)
            version = read_version(url)
    except Exception as exc:
        report.add(
            False,
            subject,
            f"{url if url.startswith('sqlite') else 'DATABASE_URL'} does not answer: {_db_error(exc, url)}",
            "check DATABASE_URL (or NANOSLACK_DB) and that the database server runs",
        )
        return
    _report_version(shown, version, report)


def _store_current(report: Report) -> bool:
    return any(c.ok and c.subject == "store" and c.what.endswith("(current)") for c in report.checks)


def check_notes(settings: Settings, report: Report) -> None:
    """Each instance's notes use against ``NANOSLACK_MEMORY_CHARS`` (docs/memory.md): a full
    scope makes the agent's ``remember`` fail until something is forgotten."""
    from nanoslack.store import Store

    cap = settings.tools.memory.memory_chars
    with Store.open(settings.db_url) as store:
        for name in settings.instance_names:
            usage = store.memories.usage(name)
            own = {scope: chars for scope, _, chars, _ in usage if scope != "room"}
            rooms = [chars for scope, _, chars, _ in usage if scope == "room"]
            parts = [f"{scope} {own.get(scope, 0):,}/{cap:,}" for scope in ("self", "private")]
            if rooms:
                fullest = f"{max(rooms):,}/{cap:,}"
                parts.append(f"room notes in {len(rooms)} conversation(s), the fullest {fullest}")
            full = any(chars >= cap for chars in (*own.values(), *rooms))
            what = "notes: " + ", ".join(parts) + " characters"
            report.add(True, name, what + (" (a scope is full: remember fails)" if full else ""))


def _db_error(exc: Exception, url: str) -> str:
    """The error's first line, without the URL's password should a driver quote it."""
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    password = urlparse(url).password
    if password:
        first = first.replace(password, "***")
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _check_new_sqlite(path: Path, report: Report) -> None:
    folder = next((p for p in path.parents if p.exists()), Path("/"))
    if os.access(folder, os.W_OK):
        report.add(True, "store", f"{path} does not exist yet: `nanoslack run` creates it")
    else:
        report.add(
            False,
            "store",
            f"{path} cannot be created: {folder} is not writable",
            "point NANOSLACK_DB (or DATABASE_URL) at a writable place",
        )


def _report_version(shown: str, version: int, report: Report) -> None:
    from nanoslack.store.migrations import SCHEMA_VERSION

    if version > SCHEMA_VERSION:
        report.add(
            False,
            "store",
            f"{shown} has schema version {version}, newer than this nanoslack's {SCHEMA_VERSION}",
            "upgrade nanoslack on this host",
        )
    elif version < SCHEMA_VERSION:
        report.add(
            True,
            "store",
            f"{shown} answers; schema version {version} is migrated to {SCHEMA_VERSION} at start",
        )
    else:
        report.add(True, "store", f"{shown} answers; schema version {version} (current)")


# -- teammates and MCP servers --------------------------------------------------------------------


def check_surface(settings: Settings, names: Sequence[str], report: Report) -> None:
    """Which of Slack's DM surfaces each instance's app uses (``NANOSLACK_SLACK_VIEW``,
    docs/agent-surface.md): both are served; ``assistant_view`` is being retired."""
    for name in names:
        key = instance_key("NANOSLACK_SLACK_VIEW", name)
        try:
            view = slack_view(settings.value, name)
        except ConfigError as exc:
            report.add(False, name, str(exc), f"set {key} to agent or assistant, or remove it")
            continue
        if view == "agent":
            report.add(True, name, "Slack app surface: agent_view (Agent messaging, the Home tab)")
            continue
        report.add(
            True,
            name,
            "Slack app surface: assistant_view, still served, but Slack is retiring assistant_view:"
            f" switch the app to agent_view (paste `nanoslack manifest {name}`, which subscribes"
            f" app_home_opened and app_context_changed), then remove {key}",
        )


def check_teammates(settings: Settings, names: Sequence[str], report: Report) -> None:
    from nanoslack.agents.teammates import AGENTS_FILE, SOUL_FILE

    root = settings.teammates_dir
    for name in names:
        folder = root / name
        soul = folder / SOUL_FILE
        try:
            soul.read_text(encoding="utf-8")
            agents = folder / AGENTS_FILE
            if agents.exists():
                agents.read_text(encoding="utf-8")
        except FileNotFoundError:
            report.add(
                False,
                name,
                f"no {soul}: {name} runs with the default persona",
                f"write {name}'s persona in {soul} (see teammates/README.md)",
            )
        except (OSError, UnicodeDecodeError) as exc:
            report.add(
                False, name, f"teammate folder unreadable: {exc}", f"make {folder} readable (UTF-8 text)"
            )
        else:
            _check_soul(root, name, report)
    _check_skills(root, report)
    for path in [root / "_mcp.json", *(root / n / "mcp.json" for n in names)]:
        if path.exists():
            _check_mcp(path, settings.env, report)


def _check_soul(root: Path, name: str, report: Report) -> None:
    """SOUL.md's front matter (docs/agents.md): each part that does not parse, with its place;
    the turns use the file without it."""
    from nanoslack.agents import load_teammate

    problems = load_teammate(root, name).problems
    for problem in problems:
        report.add(
            False,
            name,
            f"SOUL.md front matter malformed: {problem.words()} (turns use the file without it)",
            "close the block with a --- line; write each line as key: value, prompts as "
            '["one", "two"] on one line',
        )
    if not problems:
        report.add(True, name, f"teammate folder {root / name} readable")


def _check_skills(root: Path, report: Report) -> None:
    """The skills' front matter (docs/agents.md): each part that does not parse, with its
    place; the skill is listed without it."""
    from nanoslack.agents.teammates import SKILLS_DIRNAME, skill_problems

    for problem in skill_problems(root / SKILLS_DIRNAME):
        report.add(
            False,
            "skills",
            f"skill front matter malformed: {problem.words()} (the skill is listed without it)",
            "close the block with a --- line; write each line as key: value (name:, description:)",
        )


def _mcp_problem(path: Path, env: Mapping[str, str]) -> str | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        return f"unreadable: {exc}"
    except ValueError as exc:
        return f"not JSON: {exc}"
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        return 'no "mcpServers" object'
    for server, spec in servers.items():
        if not isinstance(spec, dict) or not (
            isinstance(spec.get("command"), str) or isinstance(spec.get("url"), str)
        ):
            return f'server "{server}" has neither a "command" nor a "url"'
        for part in ("env", "headers"):
            values = spec.get(part) or {}
            if not isinstance(values, dict):
                return f'server "{server}": "{part}" is not an object'
            for value in values.values():
                for var in ENV_REF_RE.findall(str(value)):
                    if not (env.get(var) or os.environ.get(var)):
                        return f'server "{server}" needs ${{{var}}}, which is not set'
    return None


def _check_mcp(path: Path, env: Mapping[str, str], report: Report) -> None:
    problem = _mcp_problem(path, env)
    if problem is None:
        report.add(True, str(path), "MCP servers file parses")
    else:
        report.add(False, str(path), problem, "see teammates/README.md for the mcp.json form")


# -- routines ---------------------------------------------------------------------------------------


async def check_routines(
    settings: Settings, names: Sequence[str], bots: Sequence[Bot], report: Report
) -> None:
    """Every ``teammates/<name>/routines.toml`` (docs/routines.md): each problem a ✗ naming the
    routine, and each routine's conversation one its bot is in (when Slack answered)."""
    from nanoslack.routines import spec

    tz = settings.routine_tz()  # a malformed NANOSLACK_TZ is one of the config checks
    by_name = {bot.name: bot for bot in bots}
    for name in names:
        path = spec.routines_path(settings.teammates_dir, name)
        if not path.exists():
            continue
        loaded = spec.load(path, name, tz=tz, max_steps=settings.tools.max_steps(name))
        bot = by_name.get(name)
        if bot is not None:
            user_id = bot.user_id

            async def member_of(channel: str, bot: Bot = bot, user_id: str = user_id) -> bool | None:
                members = await _members(bot, channel)
                return False if members is None else user_id in members

            loaded = await spec.check_channels(loaded, member_of, owners=settings.owners)
        for p in loaded.problems:
            where = f"{p.file}:{p.line}" if p.line else p.file
            subject = f"{name} routine {p.routine}" if p.routine else name
            report.add(False, subject, f"routines malformed: {where}: {p.what}", spec.how_to_fix(p))
        if not loaded.problems:
            report.add(True, name, f"{path} has {len(loaded.routines)} routine(s)")


# -- the command ----------------------------------------------------------------------------------


def _config_checks(settings: Settings, report: Report) -> None:
    for bad in settings.malformed:
        # The words of run's warning (docs/configuration.md): key, value, expected, what is used.
        report.add(False, "config", bad.words(), f"set {bad.key} to {bad.expected}, or remove it")
    try:
        settings.metrics_addr  # noqa: B018 - a malformed value raises
    except ConfigError as exc:
        report.add(False, "config", str(exc), "write NANOSLACK_METRICS_ADDR as host:port, or leave it empty")
    for name, key in settings.skipped:
        report.add(False, name, f"{key} is not set: the instance is skipped", f"put {name}'s token in {key}")
    if not settings.instances and not settings.skipped:
        report.add(
            False,
            "config",
            "no instance configured",
            "set SLACK_INSTANCES and each instance's SLACK_BOT_TOKEN_<SUF> / SLACK_APP_TOKEN_<SUF>",
        )


async def diagnose(settings: Settings, *, agents: bool = False) -> Report:
    report = Report()
    _config_checks(settings, report)
    bots = [bot for inst in settings.instances if (bot := await check_instance(settings, inst.name, report))]
    await check_rooms(settings, bots, report)
    await check_owners(settings, bots, report)
    names = [*settings.instance_names, *(n for n, _ in settings.skipped)]
    await check_agents(settings, names, report, answer=agents)
    check_store(settings, report)
    if _store_current(report):
        check_notes(settings, report)
    check_surface(settings, names, report)
    check_teammates(settings, names, report)
    await check_routines(settings, names, bots, report)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Check a fleet's configuration before running it."
    )
    parser.add_argument("--env-file", type=Path, default=None, help="read this file instead of ./.env")
    parser.add_argument("--agents", action="store_true", help="also send each back end a tiny request")
    args = parser.parse_args(argv)
    # Library warnings go to stderr, redacted; the report is stdout.
    configure_logging("warning", "console", stream=sys.stderr)
    try:
        settings = load_settings(args.env_file)
    except ConfigError as exc:
        print(Check(False, "config", str(exc), "fix the .env").line())
        return 1
    report = asyncio.run(diagnose(settings, agents=args.agents))
    for check in report.checks:
        print(check.line())
    total, failed = len(report.checks), report.failed
    print(f"{total} checks, {failed} failed" if failed else f"{total} checks, all passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
