"""The turns that answer a teammate's ``ask_agent`` (docs/agents.md "Asking a teammate").

The asked instance runs one turn host-side for the ask, with its own persona, tools and
notes, shown only the question (and the files passed on, as the asker saw them), tagged
``[Asked by <name>]``. It posts nothing in Slack: what it writes is the asker's tool result.
It runs on the asking turn's task, inside that turn's slot of the fleet's cap (the asker
waits for it; a second slot could leave every slot to an asker waiting on a turn that
never gets one), and:

- it is a turn like any other in the store: its row (``thread_key`` ``ask:<turn>:<n>``, the
  asking turn and the ask's number there, which ``nanoslack turns --steps`` follows), its
  steps, its tokens on the asked instance's budgets;
- it continues the asking turn's trace (the request's ``traceparent``);
- it holds the instance's turn slot (``TurnSlot``): a ``serial: true`` teammate busy in
  another thread answers when that turn is done, if that is within the timeout; any other
  teammate answers at once, beside its turns in other threads;
- it ends within ``NANOSLACK_ASK_TIMEOUT``: past it the turn is cancelled and recorded
  ``cancelled``, and the result says so; the asking turn cancelled (a halt, a stop) cancels
  it the same way;
- it is refused at once, with the reason as the result, in a halted room, in a room whose
  budget is spent, and while the instance stops; a spent daily budget ends it before its
  first model call (``budget``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable

from nanoslack import tracing
from nanoslack.agents import Agent, BudgetExhausted, ToolResult, TurnFailed
from nanoslack.agents.drafts import drafting
from nanoslack.budgets import RoomBudget
from nanoslack.control import is_acknowledgement
from nanoslack.halts import Halts
from nanoslack.logs import get_logger
from nanoslack.store import Store
from nanoslack.store.outage import StoreOutage, until_stored
from nanoslack.tools import Toolboxes, TurnEffects
from nanoslack.tools.ask import AskedBy, AskRequest, cut_answer
from nanoslack.turns.record import TurnRecorder
from nanoslack.turns.slot import TurnSlot
from nanoslack.turns.transcript import Transcripts

log = get_logger(__name__)


def question_text(request: AskRequest) -> str:
    """What the asked turn is shown: the question, then each file passed on as the asker saw
    it (its text, or the line that stands for it; an image also goes as image input)."""
    if not request.files:
        return request.question
    return "\n\n".join([request.question, *(f.shown for f in request.files)])


class AskedTurns:
    """One instance's asked turns."""

    def __init__(
        self,
        *,
        instance: str,
        store: Store,
        agent: Agent,
        transcripts: Transcripts,
        recorder: TurnRecorder,
        toolboxes: Toolboxes,
        halts: Halts,
        room_budget: RoomBudget | None,
        sender_of: Callable[[str], str | None],
        closing: Callable[[], bool],
        slot: TurnSlot | None = None,
    ) -> None:
        self.instance = instance
        self._store = store
        self._agent = agent
        self._transcripts = transcripts
        self._recorder = recorder
        self._toolboxes = toolboxes
        self._halts = halts
        self._room_budget = room_budget
        self._sender_of = sender_of
        self._closing = closing
        self._slot = slot or TurnSlot()

    async def answer(self, request: AskRequest) -> ToolResult:
        refusal = self._refusal(request)
        if refusal is not None:
            log.info("ask refused", instance=request.asker, to=self.instance, reason=refusal)
            return ToolResult(refusal, is_error=True)
        with tracing.turn(
            instance=self.instance,
            conversation=request.channel,
            thread=request.thread_key,
            trigger="ask",
            parent=request.traceparent,
        ):
            return await self._run(request)

    def _refusal(self, request: AskRequest) -> str | None:
        me, channel = self.instance, request.channel
        if self._closing():
            return f"not asked: {me} is stopping"
        if channel and self._halts.is_halted(channel):
            return f"not asked: this room is halted; {me} answers nothing here until an owner resumes it"
        if channel and self._room_budget is not None and self._room_budget.paused(channel):
            return f"not asked: this room's budget for today is spent; {me} answers nothing here today"
        return None

    async def _run(self, request: AskRequest) -> ToolResult:
        me, asker = self.instance, request.asker
        sender = self._sender_of(asker) or f"slack:bot:{asker}"
        turn, _recall = self._transcripts.build_asked(
            asker=asker,
            sender_id=sender,
            channel=request.channel,
            thread_key=request.thread_key,
            question=question_text(request),
            files=request.files,
        )
        turn_id = self._store.turns.start(
            instance=me,
            channel=request.channel,
            thread_key=request.thread_key,
            reply_thread_ts="",
            sender_id=sender,
            through_ts="",
            messages=0,
            wrapping_up=False,
        )
        log.info("asked turn started", instance=me, turn=turn_id, asked_by=asker, depth=request.depth)
        tools = self._toolboxes.for_turn(turn_id, turn, (), asked=AskedBy(request.depth, request.chain))
        effects = tools.effects
        record = functools.partial(self._recorder.asked, turn_id, turn, effects=effects)
        try:
            # Not the asker's draft: what the asked turn writes never streams into the asker's DM.
            with drafting(None):
                async with asyncio.timeout(request.timeout) as limit, self._slot.turn():
                    # A serial teammate (``serial: true``) busy in another thread: the ask
                    # waits its turn, within the same timeout.
                    reply = await self._agent.run(turn, tools)
        except asyncio.CancelledError:
            # The asking turn was cancelled (a halt, a stop): so is this one, recorded as such.
            with contextlib.suppress(Exception):
                record("cancelled", error="the asking turn was cancelled")
            raise
        except TimeoutError:
            if not limit.expired():
                raise  # the back end's own timeout: a failure below
            error = f"no answer within {request.timeout:g} s (NANOSLACK_ASK_TIMEOUT): cancelled"
            await self._stored(functools.partial(record, "cancelled", error=error))
            log.warning("ask timed out", instance=asker, to=me, turn=turn_id, timeout=request.timeout)
            return ToolResult(
                f"no answer: {me} did not answer within {request.timeout:g} seconds "
                "(NANOSLACK_ASK_TIMEOUT); the question was withdrawn",
                is_error=True,
            )
        except BudgetExhausted as exc:
            await self._stored(functools.partial(record, "budget", error=str(exc)))
            return ToolResult(f"not answered: {me}'s {exc}", is_error=True)
        except TurnFailed as exc:
            return await self._failed(record, str(exc))
        except Exception as exc:  # a back-end bug: the asker hears of it, the instance goes on
            return await self._failed(record, f"{type(exc).__name__}: {exc}")
        answer = _answer(effects, reply.posts)
        status = "done" if answer else "silent"
        await self._stored(functools.partial(record, status, answer=len(answer)))
        if not answer:
            return ToolResult(f"{me} had no answer")
        return ToolResult(cut_answer(answer))

    async def _failed(self, record: Callable[..., None], error: str) -> ToolResult:
        await self._stored(functools.partial(record, "failed", error=error))
        return ToolResult(f"not answered: {self.instance}'s turn failed ({error[:200]})", is_error=True)

    async def _stored(self, outcome: Callable[[], None]) -> None:
        await until_stored(outcome, StoreOutage("turns", instance=self.instance))


def _answer(effects: TurnEffects, posts: tuple[str, ...]) -> str:
    """What the asked turn said, in order (``send_message`` first, then its reply), without
    acknowledgements: one text."""
    said = [p.strip() for p in (*effects.posts, *posts) if p.strip() and not is_acknowledgement(p)]
    return "\n\n".join(said)
