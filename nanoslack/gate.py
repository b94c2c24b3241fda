"""The sender gate (docs/architecture.md): may this sender talk to this instance's agent?

Runs on engaged messages only and writes their ``messages`` row: ``pending`` when
allowed, ``held`` while an owner is asked, ``refused`` otherwise.

- ``public`` rooms admit everyone.
- Owners (``SLACK_OWNER``), admins and members of the instance's agent group pass.
- Anyone else meets the room's ``unknown_sender_policy``: ``strict`` refuses;
  ``decline_notify`` answers a DM with one polite line (at most once a day per
  sender) and is ``strict`` in groups; ``request_approval`` holds the message and
  asks the owners once per (agent group, sender), Allow or Deny (``nanoslack.asks``:
  one DM per owner, the first answer decides, every DM then says who decided).

The approvals row is unique per (agent group, sender): that is what keeps twenty
messages at one question, and what remembers a Deny. Membership is cached per
instance and re-read when the store's version moves, so an operator's SQL applies
to the next message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from nanoslack import mrkdwn
from nanoslack.asks import APPROVAL, OPERATOR, OwnerAsks, who
from nanoslack.frozen import quick_init
from nanoslack.inbound import Inbound, InboxKey
from nanoslack.logs import get_logger
from nanoslack.router import Route
from nanoslack.store import ApprovalRow, GroupRow, Store

log = get_logger(__name__)

# allow: the agent may answer (row ``pending``); hold: an owner is asked (``held``);
# refuse: not let in (``refused``); decline: refused, and told so once a day (DMs).
Action = Literal["allow", "hold", "refuse", "decline"]

DECLINE_TEXT = "Sorry, I can only talk with people my owner has let in. Please ask them for access."
DECLINE_EVERY_S = 24 * 3600.0
HELD_TEXT_PREVIEW = 300


@quick_init
@dataclass(frozen=True, slots=True)
class Verdict:
    action: Action
    reason: str
    approval_id: int | None = None


@dataclass(frozen=True)
class Decision:
    approval: ApprovalRow | None
    released: list[InboxKey] = field(default_factory=list)  # held messages now pending (allow)
    refused: list[InboxKey] = field(default_factory=list)  # held messages now refused (deny)
    applied: bool = False  # False: unknown id, or already decided (a double click)


def approve_command(instance: str, sender_id: str) -> str:
    return f"nanoslack senders approve {instance} {sender_id}"


def slack_user_of(sender_id: str) -> str | None:
    """``slack:U…`` → ``U…``; None for bots, whose ids can never be an owner's."""
    if sender_id.startswith("slack:") and not sender_id.startswith("slack:bot:"):
        return sender_id[len("slack:") :]
    return None


def _room(platform_id: str | None) -> str:
    channel = (platform_id or "").removeprefix("slack:")
    return mrkdwn.room(channel) if channel else "an unknown room"


class Gate:
    def __init__(self, store: Store, asks: OwnerAsks) -> None:
        self._store = store
        self._asks = asks
        self.instance = asks.instance
        self.owners = asks.owners
        self._version: tuple[int, ...] = ()
        self._agent_group_id: int | None = None
        self._members: frozenset[str] = frozenset()

    # -- judging an engaged message ----------------------------------------------------------

    def judge(self, msg: Inbound, route: Route) -> Verdict:
        with self._store.transaction():
            self._refresh()
            verdict = self._judge(msg, route.group)
        return verdict

    def _refresh(self) -> None:
        version = self._store.cache_version()
        if version == self._version and self._agent_group_id is not None:
            return
        agent_group = self._store.agents.ensure(self.instance)
        self._agent_group_id = agent_group.id
        self._members = self._store.agents.members(agent_group.id)
        # ensure() may have bumped the generation; key the cache on the state it saw.
        self._version = self._store.cache_version()

    @property
    def agent_group_id(self) -> int:
        assert self._agent_group_id is not None
        return self._agent_group_id

    def is_owner(self, sender_id: str) -> bool:
        return self._asks.is_owner(slack_user_of(sender_id))

    def _judge(self, msg: Inbound, group: GroupRow | None) -> Verdict:
        sender = msg.sender
        if group is None:
            return self._refuse_unrouted(msg, sender)
        if group.unknown_sender_policy == "public":
            return self._allow(msg, group, "public")
        if self.is_owner(sender):
            return self._allow(msg, group, "owner")
        if sender in self._members:
            return self._allow(msg, group, "member")
        return self._unknown(msg, group, sender)

    def _allow(self, msg: Inbound, group: GroupRow, reason: str) -> Verdict:
        self._store.messages.add(msg, group_id=group.id, status="pending")
        return Verdict("allow", reason)

    def _refuse_unrouted(self, msg: Inbound, sender: str) -> Verdict:
        # The router engages only with a group; refuse rather than guess a policy.
        self._store.messages.add(msg, group_id=None, status="refused")
        log.warning(
            "sender refused",
            policy=None,
            sender=sender,
            group=msg.platform_id,
            reason="no messaging group",
            instance=self.instance,
        )
        return Verdict("refuse", "no messaging group")

    def _unknown(self, msg: Inbound, group: GroupRow, sender: str) -> Verdict:
        policy = group.unknown_sender_policy
        if not sender:
            return self._refuse(msg, group, sender, "no sender id")
        if policy == "request_approval":
            return self._request_approval(msg, group, sender)
        if policy == "decline_notify" and group.is_dm:
            return self._decline(msg, group, sender)
        if policy not in ("strict", "decline_notify"):
            # An unknown value (a typo in an operator's UPDATE) must not open the gate.
            log.warning(
                "unknown unknown_sender_policy: treating as strict",
                instance=self.instance,
                platform_id=group.platform_id,
                policy=policy,
            )
        return self._refuse(msg, group, sender, "strict")

    def _refuse(
        self, msg: Inbound, group: GroupRow, sender: str, reason: str, action: Action = "refuse"
    ) -> Verdict:
        self._store.messages.add(msg, group_id=group.id, status="refused")
        count = self._store.refusals.count(group.id, sender, self.instance, reason)
        log.info(
            "sender refused",
            policy=group.unknown_sender_policy,
            sender=sender,
            group=group.platform_id,
            reason=reason,
            instance=self.instance,
            count=count,
        )
        return Verdict(action, reason)

    def _decline(self, msg: Inbound, group: GroupRow, sender: str) -> Verdict:
        verdict = self._refuse(msg, group, sender, "declined", action="decline")
        if self._store.refusals.claim_notice(group.id, sender, "declined", every=DECLINE_EVERY_S):
            self._store.outbox.enqueue(
                instance=self.instance,
                dedupe_key=f"decline:{self.instance}:{msg.channel}:{msg.ts}",
                purpose="notice",
                channel=msg.channel,
                text=DECLINE_TEXT,
            )
        return verdict

    def _request_approval(self, msg: Inbound, group: GroupRow, sender: str) -> Verdict:
        # The sender's request row exists from their second message on: one indexed
        # read then, no insert and no notice.
        state = self._store.approvals.state(self.agent_group_id, sender)
        created = False
        if state is None:
            approval, created = self._store.approvals.open_or_get(self.agent_group_id, group.id, sender)
            state = (approval.id, approval.status)
        approval_id, status = state
        if status == "denied":
            return self._refuse(msg, group, sender, "denied")
        if status == "approved":
            # Approved once, but no longer a member: an operator removed them on
            # purpose, so do not ask again behind their back.
            return self._refuse(msg, group, sender, "membership revoked")
        self._store.messages.add(msg, group_id=group.id, status="held")
        if created:
            self._ask_owner(approval, msg)
        return Verdict("hold", "awaiting approval", approval_id)

    def _ask_owner(self, approval: ApprovalRow, msg: Inbound) -> None:
        if not self.owners:
            log.warning(
                "approval request logged: no owner configured",
                instance=self.instance,
                sender=approval.sender_id,
                group=approval.platform_id,
                approval_id=approval.id,
                command=approve_command(self.instance, approval.sender_id),
            )
            return
        summary = self._describe(approval)
        self._asks.open(
            APPROVAL,
            str(approval.id),
            summary,
            detail=_quoted(msg.text),
            text=f"{summary} Allow or deny?",
        )
        # The first owner is the one the request row names; every owner is asked.
        self._store.approvals.set_owner(approval.id, self.owners[0])
        log.info(
            "approval requested",
            instance=self.instance,
            sender=approval.sender_id,
            owner=self.owners[0],
            owners=len(self.owners),
            group=approval.platform_id,
            approval_id=approval.id,
        )

    def _describe(self, approval: ApprovalRow) -> str:
        user = self._store.users.get(approval.sender_id)
        who = user.label if user else approval.sender_id
        return f"*{who}* wants to talk to *{self.instance}* in {_room(approval.platform_id)}."

    # -- decisions -------------------------------------------------------------------------

    def decide(self, approval_id: int, *, allow: bool, by_user: str, override: bool = False) -> Decision:
        """An owner's click (``by_user`` = their U…) or the operator CLI (``OPERATOR``).

        Idempotent: a second answer to the same request changes nothing (``applied``
        False). ``override`` (the operator only) reverses an earlier answer.
        """
        self._asks.authorize(by_user)
        if override:
            self._asks.authorize_operator(by_user)
        with self._store.transaction():
            approval = self._store.approvals.decide(approval_id, allow=allow, by=by_user, override=override)
            if approval is None:
                return Decision(self._store.approvals.get(approval_id))
            decision = self._apply(approval, allow, by_user, override)
        log.info(
            "sender approved" if allow else "sender denied",
            instance=approval.instance,
            sender=approval.sender_id,
            by=by_user,
            approval_id=approval.id,
            released=len(decision.released),
            refused=len(decision.refused),
        )
        return decision

    def _apply(self, approval: ApprovalRow, allow: bool, by_user: str, override: bool) -> Decision:
        store = self._store
        if allow:
            store.agents.add_member(approval.agent_group_id, approval.sender_id, added_by=by_user)
            released = store.messages.release_held(approval.instance, approval.sender_id, "pending")
            refused: list[InboxKey] = []
        else:
            released = []
            # A Deny (also the CLI reversing an earlier Allow) takes the sender out.
            store.agents.remove_member(approval.agent_group_id, approval.sender_id)
            refused = store.messages.release_held(approval.instance, approval.sender_id, "refused")
            if refused:
                store.refusals.count(
                    approval.messaging_group_id,
                    approval.sender_id,
                    approval.instance,
                    "denied",
                    n=len(refused),
                )
        # Every owner's DM now says who decided (one still unsent is withdrawn).
        answer = self._asks.reverse if override else self._asks.close
        verdict = f"{'Allowed' if allow else 'Denied'} by {_who(by_user)}."
        answer(
            APPROVAL,
            str(approval.id),
            choice="approve" if allow else "deny",
            by_user=by_user,
            verdict=verdict,
        )
        return Decision(approval, released, refused, applied=True)


def _who(by_user: str) -> str:
    return "the operator (CLI)" if by_user == OPERATOR else who(by_user)


def _quoted(held_text: str) -> str:
    """The held message as the owners see it under the question: quoted, cut short."""
    preview = held_text if len(held_text) <= HELD_TEXT_PREVIEW else held_text[: HELD_TEXT_PREVIEW - 1] + "…"
    return "\n".join("> " + line for line in (preview or "(no text)").splitlines() or [""])
