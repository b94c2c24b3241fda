"""The engagement router (docs/architecture.md): does this instance answer this message?

A messaging group is this instance's row for one conversation. It is created only
when someone addresses the instance (a mention of its bot user, or a DM), so merely
hearing a busy channel leaves no trace but room context. Engage modes:

- ``pattern``: ``re.search(engage_pattern, text)``. The DM default ``.`` means "every
  message", including one with empty text (a bare file share), which a literal
  ``re.search('.', '')`` would miss.
- ``mention``: only messages that mention the instance's bot user.
- ``mention-sticky``: a mention engages and marks its thread; later messages in that
  thread engage without one. Never sticky in DMs (they have no threads).

A room feature may decide a room's messages instead of the engage mode
(``RoomFeature.engagement``, docs/architecture.md "Room features"): the router asks the
features in order, the first answer counts.

Messages that do not engage are stored as ``context`` for later turns; engaged ones
are left to the gate, which writes their row.

Groups are cached per instance and the cache is dropped whenever the store's
``cache_version`` moves (another process committed, e.g. an operator's ``q.py``
UPDATE, or this process wrote groups or members), so SQL takes effect on the next
message.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from nanoslack.control import ACK_FILTERED, ACKNOWLEDGEMENT, is_acknowledgement
from nanoslack.features import Engagement, RoomFeature
from nanoslack.frozen import quick_init
from nanoslack.inbound import Inbound
from nanoslack.logs import get_logger
from nanoslack.store import GroupRow, RoomRow, Store

log = get_logger(__name__)

MATCH_ALL = "."
# Remembered engaged threads per group; bounded so a long-lived fleet cannot grow it forever.
MAX_CACHED_THREADS = 50_000


@quick_init
@dataclass(frozen=True, slots=True)
class Route:
    group: GroupRow | None
    engaged: bool
    # Engaged: "mention", "dm", "sticky thread", "pattern", or a room feature's reason.
    # Ignored: "not mentioned", "pattern not matched", "no messaging group", or a feature's.
    reason: str
    # The A2A room's settings (kind, lead, mission) for a group conversation.
    room: RoomRow | None = None


class Router:
    def __init__(
        self, store: Store, *, instance: str, bot_user_id: str, features: Sequence[RoomFeature]
    ) -> None:
        self._store = store
        self.instance = instance
        self.bot_user_id = bot_user_id
        self._features = tuple(features)
        self._version: tuple[int, ...] = ()
        self._groups: dict[str, GroupRow | None] = {}
        self._rooms: dict[str, RoomRow] = {}
        self._engaged: set[tuple[int, str]] = set()
        # Threads known to have no engagement row when the current batch began
        # (``prefetch``); what this batch engages leaves the set.
        self._absent: set[tuple[int, str]] = set()
        self._known_users: set[str] = set()
        self._patterns: dict[str, re.Pattern[str] | None] = {}

    def route(self, msg: Inbound) -> Route:
        with self._store.transaction():
            self._refresh()
            self._ensure_user(msg)
            if msg.from_fleet:
                # open-a2a-room's intro mentions everyone, a pause notice answers a bot:
                # they explain the room and ask nobody anything. Room context only, and
                # no messaging group.
                group = self._known_group(msg.platform_id)
                route = Route(group, False, "room intro" if msg.intro else "fleet notice")
            else:
                room = None if msg.is_dm else self._room(msg.channel)
                by_feature = None if room is None else self._feature_engagement(msg, room)
                group = self._group_for(msg, by_feature is not None and by_feature.addressed)
                route = self._acknowledged(msg, group) or self._engage(msg, group, room, by_feature)
            if not route.engaged:
                self._store.messages.add(msg, group_id=group.id if group else None, status="context")
        return route

    def prefetch(self, msgs: Sequence[Inbound]) -> None:
        """At the start of a batch, in its transaction: look up in one statement per
        group whether the threads of the batch's unmentioned messages are engaged, so
        routing them asks the store nothing (docs/architecture.md: the lookup per message and instance
        was a quarter of the worker's statements)."""
        self._absent = set()
        self._refresh()
        wanted: dict[int, set[str]] = {}
        for msg in msgs:
            thread = msg.thread_key
            group = self._groups.get(msg.platform_id)
            if thread is None or group is None or group.engage_mode != "mention-sticky" or group.is_dm:
                continue
            if (group.id, thread) not in self._engaged and not msg.mentions_user(self.bot_user_id):
                wanted.setdefault(group.id, set()).add(thread)
        for group_id, threads in wanted.items():
            engaged = self._store.groups.engaged_among(group_id, threads)
            for thread in threads:
                key = (group_id, thread)
                if thread in engaged:
                    self._remember_thread(key)
                else:
                    self._absent.add(key)

    def _refresh(self) -> None:
        version = self._store.cache_version()
        if version != self._version:
            self._version = version
            self._groups.clear()
            self._engaged.clear()
            self._absent.clear()
            self._known_users.clear()
            self._rooms.clear()

    def _ensure_user(self, msg: Inbound) -> None:
        sender = msg.sender
        if not sender or sender in self._known_users:
            return
        self._store.users.ensure(
            sender, kind="bot" if msg.is_bot else "human", display_name=msg.bot_name, slack_user_id=msg.user
        )
        self._known_users.add(sender)

    def _known_group(self, platform_id: str) -> GroupRow | None:
        if platform_id in self._groups:
            return self._groups[platform_id]
        return self._store.groups.get(platform_id, self.instance)

    def _room(self, channel: str) -> RoomRow:
        room = self._rooms.get(channel)
        if room is None:
            room = self._rooms[channel] = self._store.room_kinds.get(channel)
        return room

    def _feature_engagement(self, msg: Inbound, room: RoomRow) -> Engagement | None:
        for feature in self._features:
            engagement = feature.engagement(msg, room, bot_user_id=self.bot_user_id)
            if engagement is not None:
                return engagement
        return None

    def _group_for(self, msg: Inbound, addressed: bool) -> GroupRow | None:
        """The instance's group for the conversation, created when someone addresses the
        instance: a DM, a mention, or a feature's ``addressed``."""
        platform_id = msg.platform_id
        group = self._known_group(platform_id)
        if group is None and (msg.is_dm or addressed or msg.mentions_user(self.bot_user_id)):
            group = self._store.groups.create(platform_id, self.instance, kind="dm" if msg.is_dm else "group")
            log.info(
                "messaging group created", instance=self.instance, platform_id=platform_id, kind=group.kind
            )
            # Our own create bumped the generation; re-key so the entry below survives.
            self._version = self._store.cache_version()
        self._groups[platform_id] = group
        return group

    def _acknowledged(self, msg: Inbound, group: GroupRow | None) -> Route | None:
        """A bot's bare "thanks!" is room context: answering it is how ping-pong starts."""
        if not msg.is_bot or not is_acknowledgement(msg.text):
            return None
        log.info(ACK_FILTERED, instance=self.instance, channel=msg.channel, ts=msg.ts, sender=msg.sender)
        return Route(group, False, ACKNOWLEDGEMENT)

    def _engage(
        self, msg: Inbound, group: GroupRow | None, room: RoomRow | None, by_feature: Engagement | None
    ) -> Route:
        if group is None:
            return Route(None, False, "no messaging group", room)
        if by_feature is not None and not group.is_dm:
            return Route(group, by_feature.engaged, by_feature.reason, room)
        engaged, reason = self._by_mode(msg, group)
        return Route(group, engaged, reason, room)

    def _by_mode(self, msg: Inbound, group: GroupRow) -> tuple[bool, str]:
        mode = group.engage_mode
        if mode == "pattern":
            return self._by_pattern(msg, group)
        mentioned = msg.mentions_user(self.bot_user_id)
        if mode == "mention-sticky" and not group.is_dm:
            return self._sticky(msg, group, mentioned)
        if mentioned:
            return True, "mention"
        if mode not in ("mention", "mention-sticky"):
            log.warning(
                "unknown engage_mode: treating as mention",
                instance=self.instance,
                platform_id=group.platform_id,
                engage_mode=mode,
            )
        return False, "not mentioned"

    def _by_pattern(self, msg: Inbound, group: GroupRow) -> tuple[bool, str]:
        source = group.engage_pattern or MATCH_ALL
        if source == MATCH_ALL:
            return True, "dm" if group.is_dm else "pattern"
        pattern = self._compile(source, group)
        if pattern is not None and pattern.search(msg.text):
            return True, "pattern"
        return False, "pattern not matched"

    def _compile(self, source: str, group: GroupRow) -> re.Pattern[str] | None:
        if source not in self._patterns:
            try:
                self._patterns[source] = re.compile(source)
            except re.error as exc:
                # An operator's typo must not take the instance down: engage nothing
                # there (closed) and say why, once per pattern.
                log.warning(
                    "invalid engage_pattern: not engaging",
                    instance=self.instance,
                    platform_id=group.platform_id,
                    pattern=source,
                    error=str(exc),
                )
                self._patterns[source] = None
        return self._patterns[source]

    def _sticky(self, msg: Inbound, group: GroupRow, mentioned: bool) -> tuple[bool, str]:
        thread = msg.thread_key
        if thread is None:
            return mentioned, "mention" if mentioned else "not mentioned"
        key = (group.id, thread)
        if mentioned:
            if key not in self._engaged:
                self._store.groups.engage_thread(group.id, thread)
                self._remember_thread(key)
            return True, "mention"
        if key in self._engaged or (
            key not in self._absent and self._store.groups.is_engaged(group.id, thread)
        ):
            self._remember_thread(key)
            return True, "sticky thread"
        return False, "not mentioned"

    def _remember_thread(self, key: tuple[int, str]) -> None:
        if len(self._engaged) >= MAX_CACHED_THREADS:
            self._engaged.clear()
        self._engaged.add(key)
        self._absent.discard(key)
