"""The playground's stage: the emulator with the sample workspace, two A2A rooms opened
before the fleet starts (the mention room the way ``open-room --public`` does, and a
``round`` room, the private channel #crew-round, the way ``open-room --kind round
--mission …`` leaves it), and the fleet started against them.

Everything the page shows comes from here: the emulator holds the messages, the
fleet's store holds hops, approvals and turns.
"""

from __future__ import annotations

import asyncio
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nanoslack.config import env_suffix, load_settings
from nanoslack.config.agent import BACKENDS, unknown_backend
from nanoslack.config.values import read_env_file
from nanoslack.emulator import App, Emulator, User, apply_workspace, sample_workspace
from nanoslack.inbound import Inbound
from nanoslack.ops.envfile import append_to_list, write_env
from nanoslack.ops.open_room import (
    ROOMS_KEY,
    Identity,
    Request,
    load_env,
    make_room_public,
    open_room,
    set_room_kind,
)
from nanoslack.pipeline import Outcome
from nanoslack.slack.fleet import Fleet

# The sample crew shipped with the repository (SOUL.md, AGENTS.md, script.json each).
TEAMMATES = Path(__file__).resolve().parent.parent.parent / "teammates"
CREW = ("dana", "eli", "fay")
# fay keeps the room's default policy (request_approval): the first bot that hands
# work to her waits for the owner's Allow, so the approval beat stays visible.
APPROVER = "fay"
MAX_HOPS = 3
A2A_TTL_S = 1.0
ROOM_LABEL = "a2a-room"
ROUND_ROOM = "crew-round"
ROUND_MISSION = "plan the week's work: each of us answers for our own part, dana dispatches"
LLM_BACK_ENDS = ("openai", "anthropic")
LLM_KEYS = (
    "NANOSLACK_AGENT",
    "NANOSLACK_MODEL",
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_API_KEY",
    "NANOSLACK_DAILY_TOKENS",
    "NANOSLACK_DAILY_USD",
)
PUBLIC = tuple(name for name in CREW if name != APPROVER)
_MENTION_RE = re.compile(r"(?<![<\w])@([a-z0-9_-]+)\b", re.IGNORECASE)


@dataclass
class Stage:
    emu: Emulator
    fleet: Fleet
    room: str
    human: User
    apps: dict[str, App]
    data_dir: Path
    max_hops: int
    public: tuple[str, ...]
    # The round room (docs/team-rooms.md): a question to it wakes the whole crew; dana closes.
    round_room: str = ""
    _users: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._users = {self.human.id: self.human.name, **{a.bot_user_id: n for n, a in self.apps.items()}}

    @property
    def user_names(self) -> dict[str, str]:
        """Slack user id → display name (the human and the bots' users)."""
        return dict(self._users)

    @property
    def sender_names(self) -> dict[str, str]:
        """The pipeline's sender ids (``slack:U…``, ``slack:bot:B…``) → display name."""
        return {
            f"slack:{self.human.id}": self.human.name,
            **{f"slack:bot:{a.bot_id}": n for n, a in self.apps.items()},
        }

    def link_mentions(self, text: str) -> str:
        """``@dana`` → ``<@U…>`` for the workspace's members, as Slack's composer does."""
        by_name = {name.lower(): uid for uid, name in self._users.items()}

        def sub(m: re.Match[str]) -> str:
            uid = by_name.get(m.group(1).lower())
            return f"<@{uid}>" if uid else m.group(0)

        return _MENTION_RE.sub(sub, text)

    async def post_as_human(self, channel: str, text: str, thread_ts: str | None = None) -> str:
        return await self.emu.post_as_user(self.human.id, channel, self.link_mentions(text), thread_ts)

    async def stop(self) -> None:
        await self.fleet.stop()


def fresh_data_dir(path: Path, *, keep: bool) -> Path:
    """``data/demo``: emptied for each run unless ``keep``."""
    if path.exists() and not keep:
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    return path


SCRIPT_CREW = "the script back end (teammates/)"


def llm_settings(env_file: Path) -> dict[str, str]:
    """The LLM back end configured in the user's ``.env`` (openai or anthropic), if any:
    the crew then answers with it instead of the script."""
    env = read_env_file(env_file)
    if env.get("NANOSLACK_AGENT", "").strip().lower() not in LLM_BACK_ENDS:
        return {}
    return {k: v for k, v in env.items() if k in LLM_KEYS and v.strip()}


def backend_note(env_file: Path) -> str | None:
    """What the demo says when the user's ``.env`` names a back end it does not run: one it
    does not know (in the words ``run`` and ``doctor`` use), or ``command``; None otherwise."""
    value = read_env_file(env_file).get("NANOSLACK_AGENT", "").strip()
    if not value or value.lower() in (*LLM_BACK_ENDS, "script"):
        return None
    if value.lower() not in BACKENDS:
        return unknown_backend("NANOSLACK_AGENT", value, SCRIPT_CREW).words()
    only = f"the demo runs an LLM back end or {SCRIPT_CREW}"
    return f"NANOSLACK_AGENT={value} in {env_file.name}: {only}; it runs {SCRIPT_CREW}"


def _env_values(
    emu: Emulator, human: User, apps: dict[str, App], max_hops: int, llm: dict[str, str]
) -> dict[str, str]:
    values = {
        "SLACK_API_URL": emu.api_url,
        "NANOSLACK_DB": "nanoslack.db",
        # Room scope: one bot message is one hop, however many bots hear it.
        "SLACK_A2A_HOP_SCOPE": "room",
        "SLACK_A2A_CONFIG_TTL": str(A2A_TTL_S),
        "SLACK_INSTANCES": ",".join(CREW),
        "SLACK_A2A_MAX_HOPS": str(max_hops),
        "SLACK_OWNER": human.id,
        "NANOSLACK_AGENT": "script",
        "NANOSLACK_TEAMMATES": str(TEAMMATES),
        # dana leads: she may hand work to anyone, anyone may hand work to her.
        "NANOSLACK_CHIEF": "dana",
    }
    values |= llm  # NANOSLACK_AGENT=openai… replaces the script
    for app in apps.values():
        suf = env_suffix(app.name)
        values |= {f"SLACK_BOT_TOKEN_{suf}": app.bot_token, f"SLACK_APP_TOKEN_{suf}": app.app_token}
    return values


async def open_stage(
    emu: Emulator,
    data_dir: Path,
    *,
    on_outcome: Callable[[Inbound, Outcome], None] | None = None,
    max_hops: int = MAX_HOPS,
    public: Sequence[str] = PUBLIC,
    llm: dict[str, str] | None = None,
) -> Stage:
    """Fill the (started) emulator, open the rooms as an operator would, then start the
    fleet: it reads the rooms from ``.env`` and the store, and keeps the mention room's
    intro (which it receives once connected) as room context, as it does the intro of any
    room opened while the fleet runs."""
    apply_workspace(emu, sample_workspace())
    human = next(u for u in emu.users() if u.name == "alice")
    apps = {a.name: a for a in emu.apps()}
    env_file = data_dir / ".env"
    write_env(env_file, _env_values(emu, human, apps, max_hops, llm or {}), replace=True)
    room = await _open_room(emu, env_file, human, public, data_dir)
    round_room = _open_round_room(emu, env_file, human, apps, data_dir)
    # alice's DM with dana, in the sidebar from the start: the status line and a streamed reply.
    emu.create_conversation([human.id, apps["dana"].bot_user_id], kind="im")
    fleet = Fleet(load_settings(env_file, environ={}), on_outcome=on_outcome)
    await fleet.start()
    return Stage(emu, fleet, room, human, apps, data_dir, max_hops, tuple(public), round_room)


async def _open_room(
    emu: Emulator, env_file: Path, human: User, public: Sequence[str], data_dir: Path
) -> str:
    request = Request(
        instances=list(CREW), user=human.id, env_file=env_file, api_url=emu.api_url, public=False
    )
    # open_room is a sync Slack client: in a thread, so the emulator on this loop can answer.
    room = await asyncio.to_thread(open_room, request, load_env(env_file, {}))
    # What `open-room --public` does, for every instance but the approver.
    make_room_public(room, list(public), load_env(env_file, {}), base_dir=data_dir)
    return room


def _open_round_room(emu: Emulator, env_file: Path, human: User, apps: dict[str, App], data_dir: Path) -> str:
    """A private channel alice made and invited the crew to (a group DM of the same
    people would be the mention room again), set up as ``open-room --public --kind round
    --mission …`` would: listed in ``.env``, a ``round`` room in the store."""
    conv = emu.create_conversation(
        [human.id, *(apps[n].bot_user_id for n in CREW)], kind="group", name=ROUND_ROOM
    )
    append_to_list(env_file, ROOMS_KEY, conv.id)
    env = load_env(env_file, {})
    bots = [Identity(n, apps[n].bot_user_id, apps[n].bot_id) for n in CREW]
    request = Request(
        instances=list(CREW),
        user=human.id,
        env_file=env_file,
        api_url=emu.api_url,
        public=True,
        kind="round",
        mission=ROUND_MISSION,
    )
    set_room_kind(conv.id, request, env, bots=bots, base_dir=data_dir)
    make_room_public(conv.id, list(CREW), env, base_dir=data_dir)
    return conv.id
