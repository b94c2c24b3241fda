"""An owner's Allow/Deny on one tool call (docs/agents.md), through the one owner-ask mechanism.

A tool marked ``"approval": "owner"`` (``nanoslack.tools.mcp``) does not run until an
owner allows it: ``approve`` opens an ask of kind ``tool`` (one DM per owner, with
**Allow** and **Deny** buttons; the first click decides) and waits for up to
``NANOSLACK_TOOL_APPROVAL_TIMEOUT`` seconds. The click reaches the instance's core,
which hands it to ``answer`` here: the ask is closed (every owner's DM says who
decided) and the waiting call goes on. The ask's row is read every second as well, so an
answer given another way (another process, the operator) is seen too. Deny, no answer,
or no owner to ask: the call is not made, and the tool's result says why.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Mapping
from typing import Any

from nanoslack.agents import ToolResult
from nanoslack.agents.redact import scrub
from nanoslack.agents.waits import awaiting_owner
from nanoslack.asks import TOOL, Answer, OwnerAsks, who
from nanoslack.logs import get_logger, redact_text
from nanoslack.store import Store

log = get_logger(__name__)

ALLOW = "tool_allow"
DENIED = "the owner denied this call"
# The arguments shown to the owners are cut to this many characters.
MAX_SHOWN_ARGUMENTS = 1500


class OwnerToolApprover:
    """One instance's tool approvals (``nanoslack.tools.ToolApprover``)."""

    def __init__(self, store: Store, asks: OwnerAsks, *, timeout: float, poll: float = 1.0) -> None:
        self._store = store
        self._asks = asks
        self.timeout = timeout
        self._poll = poll
        self._waiting: dict[str, asyncio.Future[bool]] = {}

    @property
    def instance(self) -> str:
        return self._asks.instance

    async def approve(self, *, turn_id: int, tool: str, arguments: Mapping[str, Any]) -> ToolResult | None:
        """None when an owner allowed the call; otherwise the refusal for the model."""
        # Unique per call: a turn may ask twice, a re-run turn asks afresh.
        ref = f"{turn_id}.{secrets.token_hex(4)}"
        question = f"*{self.instance}* wants to run the tool `{tool}`. Allow it?"
        if not self._asks.open(
            TOOL, ref, question, detail=_shown(arguments), text=f"{self.instance} asks to run {tool}"
        ):
            return ToolResult(
                "no owner to ask (SLACK_OWNER is not set): the call was not made", is_error=True
            )
        log.info("tool approval asked", instance=self.instance, turn=turn_id, tool=tool, ask=ref)
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting[ref] = future
        try:
            with awaiting_owner():  # the turn's session is suspended meanwhile
                allowed = await self._wait(ref, future)
        except asyncio.CancelledError:  # the turn was stopped (a halt, Stop, a shutdown): say so in the DMs
            self._asks.expire(TOOL, ref, verdict="The turn stopped before an answer: the call was not made.")
            raise
        finally:
            self._waiting.pop(ref, None)
        if allowed is None:
            allowed = self._expire(ref)
        if allowed is None:
            log.info("tool approval timed out", instance=self.instance, turn=turn_id, tool=tool, ask=ref)
            return ToolResult(
                f"no answer from the owners within {self.timeout:g} s: the call was not made", is_error=True
            )
        return None if allowed else ToolResult(DENIED, is_error=True)

    def answer(self, answer: Answer) -> bool:
        """An owner's click (already authorized by the core); False when it came too late."""
        allow = answer.choice == ALLOW
        verdict = f"{'Allowed' if allow else 'Denied'} by {who(answer.by_user)}."
        if not self._asks.close(
            TOOL, answer.ref, choice=answer.choice, by_user=answer.by_user, verdict=verdict
        ):
            log.info("tool approval click refused", instance=self.instance, ask=answer.ref, reason="answered")
            return False
        future = self._waiting.get(answer.ref)
        if future is not None and not future.done():
            future.set_result(allow)
        log.info(
            "tool approval decided", instance=self.instance, ask=answer.ref, allow=allow, by=answer.by_user
        )
        return True

    async def _wait(self, ref: str, future: asyncio.Future[bool]) -> bool | None:
        """The click, or the row answered another way; None when the time is up."""
        deadline = time.monotonic() + self.timeout
        while (left := deadline - time.monotonic()) > 0:
            done, _ = await asyncio.wait({future}, timeout=min(self._poll, left))
            if done:
                return future.result()
            decided = self._decided(ref)
            if decided is not None:
                return decided
        return None

    def _decided(self, ref: str) -> bool | None:
        row = self._store.asks.latest(TOOL.name, ref)
        if row is None or row.is_open:
            return None
        return row.choice == ALLOW

    def _expire(self, ref: str) -> bool | None:
        """Close the ask as unanswered; an answer that landed just before wins."""
        verdict = f"No answer within {self.timeout:g} s: the call was not made."
        if self._asks.expire(TOOL, ref, verdict=verdict):
            return None
        return self._decided(ref)


def _shown(arguments: Mapping[str, Any]) -> str:
    try:
        text = json.dumps(arguments, ensure_ascii=False, indent=1, default=str)
    except (TypeError, ValueError):
        text = repr(dict(arguments))
    text = scrub(redact_text(text)).replace("```", "'''")
    if len(text) > MAX_SHOWN_ARGUMENTS:
        text = text[:MAX_SHOWN_ARGUMENTS] + "\n…"
    return f"```{text}```"
