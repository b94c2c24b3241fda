"""The sender gate (DESIGN §3.8): may this sender talk to this instance's agent?

Runs on engaged messages only and writes their ``messages`` row: ``pending`` when
allowed, ``held`` while an owner is asked, ``refused`` otherwise.

- ``public`` rooms admit everyone.
- Owners (``SLACK_OWNER``), admins and members of the instance's agent group pass.
- Anyone else meets the room's ``unknown_sender_policy``: ``strict`` refuses;
  ``decline_notify`` answers a DM with one polite line (at most once a day per
  sender) and is ``strict`` in groups; ``request_approval`` holds the message and
  asks every owner once per (agent group, sender) with Allow / Deny buttons; the
  first click decides and every owner's DM is updated to say who decided.

The approvals row is unique per (agent group, sender): that is what keeps twenty
messages at one question, and what remembers a Deny. Membership is cached per
instance and re-read when the store's version moves, so an operator's SQL applies
to the next message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from nanoslack.inbound import Inbound, InboxKey
from nanoslack.logs import get_logger
from nanoslack.router import Route
from nanoslack.store import ApprovalRow, GroupRow, Store

log = get_logger(__name__)

# allow: the agent may answer (row ``pending``); hold: an owner is asked (``held``);
# refuse: not let in (``refused``); decline: refused, and told so once a day (DMs).
Action = Literal["allow", "hold", "refuse", "decline"]

APPROVE_ACTION_ID = "nanoslack_approve"
DENY_ACTION_ID = "nanoslack_deny"
CLI_USER = "cli"
DECLINE_TEXT = "Sorry, I can only talk with people my owner has let in. Please ask them for access."
DECLINE_EVERY_S = 24 * 3600.0
HELD_TEXT_PREVIEW = 300


@dataclass(frozen=True)
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


class NotAnOwner(PermissionError):
    """Only an owner (or the operator CLI) may answer an approval request."""


def approve_command(instance: str, sender_id: str) -> str:
    return f"nanoslack senders approve {instance} {sender_id}"


def slack_user_of(sender_id: str) -> str | None:
    """``slack:U…`` → ``U…``; None for bots, whose ids can never be an owner's."""
    if sender_id.startswith("slack:") and not sender_id.startswith("slack:bot:"):
        return sender_id[len("slack:") :]
    return None


def room_mention(platform_id: str | None) -> str:
    channel = (platform_id or "").removeprefix("slack:")
    if channel[:1] in ("C", "G", "D") and channel[1:].isalnum():
        return f"<#{channel}>"
    return channel or "an unknown room"


class Gate:
    def __init__(self, store: Store, *, instance: str, owners: Sequence[str]) -> None:
        self._store = store
        self.instance = instance
        self.owners = tuple(owners)
        self._owner_set = frozenset(self.owners)
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
        user = slack_user_of(sender_id)
        return user is not None and user in self._owner_set

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
                channel=msg.channel,
                text=DECLINE_TEXT,
            )
        return verdict

    def _request_approval(self, msg: Inbound, group: GroupRow, sender: str) -> Verdict:
        approval, created = self._store.approvals.open_or_get(self.agent_group_id, group.id, sender)
        if approval.status == "denied":
            return self._refuse(msg, group, sender, "denied")
        if approval.status == "approved":
            # Approved once, but no longer a member: an operator removed them on
            # purpose, so do not ask again behind their back.
            return self._refuse(msg, group, sender, "membership revoked")
        self._store.messages.add(msg, group_id=group.id, status="held")
        if created:
            self._ask_owner(approval, msg)
        return Verdict("hold", "awaiting approval", approval.id)

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
        text, blocks = self._request_message(approval, msg.text)
        for key, owner in self._request_keys(approval):
            self._store.outbox.enqueue(
                instance=self.instance,
                dedupe_key=key,
                dm_user=owner,
                text=text,
                blocks=blocks,
                metadata={"event_type": "nanoslack_approval", "event_payload": {"approval_id": approval.id}},
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

    def _request_keys(self, approval: ApprovalRow) -> list[tuple[str, str]]:
        """(outbox key, owner) of each owner's request DM; the first owner's key is the
        request's own, so a fleet with one owner writes what it always wrote."""
        return [
            (approval.request_key if i == 0 else f"{approval.request_key}:to:{owner}", owner)
            for i, owner in enumerate(self.owners)
        ]

    def _describe(self, approval: ApprovalRow) -> str:
        user = self._store.users.get(approval.sender_id)
        who = user.label if user else approval.sender_id
        return f"*{who}* wants to talk to *{self.instance}* in {room_mention(approval.platform_id)}."

    def _request_message(self, approval: ApprovalRow, held_text: str) -> tuple[str, list[dict[str, Any]]]:
        summary = self._describe(approval)
        preview = (
            held_text if len(held_text) <= HELD_TEXT_PREVIEW else held_text[: HELD_TEXT_PREVIEW - 1] + "…"
        )
        quoted = "\n".join("> " + line for line in (preview or "(no text)").splitlines() or [""])
        blocks: list[dict[str, Any]] = [
            {"type": "section", "text": {"type": "mrkdwn", "text": f"{summary}\n{quoted}"}},
            {
                "type": "actions",
                "block_id": f"nanoslack_approval_{approval.id}",
                "elements": [
                    _button(APPROVE_ACTION_ID, "Allow", "primary", approval.id),
                    _button(DENY_ACTION_ID, "Deny", "danger", approval.id),
                ],
            },
        ]
        return f"{summary} Allow or deny?", blocks

    # -- decisions -------------------------------------------------------------------------

    def decide(self, approval_id: int, *, allow: bool, by_user: str, override: bool = False) -> Decision:
        """An owner's click (``by_user`` = their U…) or the operator CLI (``"cli"``).

        Idempotent: a second answer to the same request changes nothing (``applied``
        False). ``override`` (CLI only) reverses an earlier answer.
        """
        if by_user != CLI_USER and by_user not in self._owner_set:
            raise NotAnOwner(f"{by_user} is not an owner (SLACK_OWNER); only owners answer approval requests")
        if override and by_user != CLI_USER:
            raise NotAnOwner("only the operator CLI may reverse an approval decision")
        with self._store.transaction():
            approval = self._store.approvals.decide(approval_id, allow=allow, by=by_user, override=override)
            if approval is None:
                return Decision(self._store.approvals.get(approval_id))
            decision = self._apply(approval, allow, by_user)
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

    def _apply(self, approval: ApprovalRow, allow: bool, by_user: str) -> Decision:
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
        self._close_request(approval, allow, by_user)
        return Decision(approval, released, refused, applied=True)

    def _close_request(self, approval: ApprovalRow, allow: bool, by_user: str) -> None:
        """Replace every owner's buttons with the answer (who decided), or withdraw a
        request not yet sent."""
        keys = [key for key, _ in self._request_keys(approval)] or [approval.request_key]
        for key in keys:
            self._close_one(approval, key, allow, by_user)

    def _close_one(self, approval: ApprovalRow, key: str, allow: bool, by_user: str) -> None:
        first = key == approval.request_key
        who = "the operator (CLI)" if by_user == CLI_USER else f"<@{by_user}>"
        verdict = f"{'Allowed' if allow else 'Denied'} by {who}"
        summary = self._describe(approval)
        self._store.outbox.update_post(
            key,
            instance=approval.instance,
            dedupe_key=f"{key}:{approval.status}:{int(approval.decided_at or 0)}",
            text=f"{summary} {verdict}.",
            blocks=[
                {"type": "section", "text": {"type": "mrkdwn", "text": summary}},
                {"type": "context", "elements": [{"type": "mrkdwn", "text": verdict}]},
            ],
            channel=approval.request_channel if first else None,
            ts=approval.request_ts if first else None,
        )


def _button(action_id: str, label: str, style: str, approval_id: int) -> dict[str, Any]:
    return {
        "type": "button",
        "action_id": action_id,
        "style": style,
        "text": {"type": "plain_text", "text": label},
        "value": str(approval_id),
    }
