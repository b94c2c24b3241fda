"""The tool loop of the LLM back ends (docs/agents.md), on pydantic-ai.

The model gets the system prompt and the turn prompt, and the turn's tools
(``Tools.tools()``: each one's schema from its arguments' model); each call is checked by
that model, goes to ``Tools.call`` and its text goes back as the tool's result (a refusal,
arguments that do not fit included, as a failed result, so the model reads why and is not
told to retry). The loop ends when the model answers without a tool call (that text
is private: nothing is posted but ``send_message`` calls) or after ``Tools.max_steps``
model calls: then the turn ends with what it has (``turn step limit reached``).

Around every model call (``TurnSteps``): ``Tools.before_model_call`` first (a spent budget
stops the loop there), ``Tools.after_model_call`` with its tokens and price after, and the retries
of ``agents.http`` in between (pydantic-ai's ``RetryModelRequest``: another attempt at the
same call, the model never sees it). A failure that is not retried, or still failing after
the last attempt, fails the turn with ``TurnFailed``: the status and a short reason, with
the API key scrubbed out even when the server echoes it.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterable, Callable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from pydantic import ValidationError
from pydantic_ai import Agent, capture_run_messages
from pydantic_ai.capabilities import AbstractCapability, RawToolArgs, ValidatedToolArgs
from pydantic_ai.capabilities.abstract import WrapModelRequestHandler
from pydantic_ai.exceptions import (
    AgentRunError,
    ModelAPIError,
    ModelConnectionError,
    ModelHTTPError,
    ModelRetry,
    ModelTimeoutError,
    RetryModelRequest,
    ToolFailed,
    UnexpectedModelBehavior,
    UsageLimitExceeded,
)
from pydantic_ai.messages import (
    AgentStreamEvent,
    ModelMessage,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    ToolCallPart,
    ToolCallPartDelta,
    UserContent,
)
from pydantic_ai.models import Model, ModelRequestContext
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext, ToolDefinition
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_ai.usage import UsageLimits

from nanoslack import tracing
from nanoslack.agents import drafts
from nanoslack.agents.http import MAX_RETRY_WAIT_S, Sleep, backoff_s
from nanoslack.agents.prices import cost_usd
from nanoslack.agents.redact import scrub
from nanoslack.agents.tool import Tool
from nanoslack.agents.types import ModelCall, Tools
from nanoslack.logs import get_logger

log = get_logger("nanoslack.agents")

SEND_MESSAGE = "send_message"
REASON_CHARS = 200
# How often pydantic-ai lets the model get a tool wrong (an unknown name) before it ends
# the run: never before the step limit does.
TOOL_RETRIES = 1000

Describe = Callable[[BaseException], str]


class TurnToolset(AbstractToolset[None]):
    """The turn's ``Tools`` as pydantic-ai sees them.

    Each tool is offered with its schema (``Tool.schema``: its model's, or an MCP server's
    own, unchanged: ``strict=False`` and no schema transformer on the model) and checked by
    its model's validator before the call; a call that does not fit is refused with the
    reason as a failed result (``TurnSteps.on_tool_validate_error``). The calls run one at
    a time in the order the model made them (posts keep their order; steps are recorded in
    that order), each through ``Tools.call`` (approvals, the step's record).
    """

    def __init__(self, tools: Tools) -> None:
        self._tools = tools
        self.posts = 0

    @property
    def id(self) -> str:
        return "nanoslack"

    async def get_tools(self, ctx: RunContext[None]) -> dict[str, ToolsetTool[None]]:
        return {
            tool.name: ToolsetTool(
                toolset=self,
                tool_def=_definition(tool),
                max_retries=TOOL_RETRIES,
                args_validator=tool.validator,
            )
            for tool in self._tools.tools()
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[None], tool: ToolsetTool[None]
    ) -> str:
        # ``tool_args`` is the tool's model already (its validator's output): not checked again.
        result = await self._tools.call(name, tool_args)
        if result.is_error:
            # A failed result the model reads (why it was refused), without a "try again" prompt.
            raise ToolFailed(result.text)
        if name == SEND_MESSAGE:
            self.posts += 1
        return result.text


def _definition(tool: Tool[Any]) -> ToolDefinition:
    return ToolDefinition(
        name=tool.name,
        description=tool.description,
        parameters_json_schema=tool.schema(),
        strict=False,
        sequential=True,
    )


class TurnSteps(AbstractCapability[None]):
    """Every model call of one turn: the budget before it, its tokens after, its retries."""

    def __init__(
        self,
        tools: Tools,
        *,
        instance: str,
        model: str,
        url: str,
        attempts: int,
        sleep: Sleep,
        describe: Describe,
        provider: str = "",
    ) -> None:
        self._tools = tools
        self._provider = provider  # openai | anthropic: the trace's gen_ai.provider.name
        self._instance = instance
        self._model = model
        self._url = url
        self._attempts = max(1, attempts)
        self._sleep = sleep
        self._describe = describe
        self.tokens = 0
        self.cached_tokens = 0
        self.calls = 0
        self.attempts_of_last_call = 0

    async def wrap_model_request(
        self,
        ctx: RunContext[None],
        *,
        request_context: ModelRequestContext,
        handler: WrapModelRequestHandler,
    ) -> ModelResponse:
        self._tools.before_model_call()  # BudgetExhausted: this call is never made
        self.calls += 1
        start = time.monotonic()
        with tracing.model_call(self._model, self._provider) as span:
            try:
                response = await handler(request_context)
            except Exception as exc:
                self.attempts_of_last_call = request_context.attempt
                self._tools.after_model_call(
                    ModelCall(self._model, tokens=0, ms=_ms(start), error=self._describe(exc))
                )
                raise
            span.set(_usage_attributes(response))
        usage = response.usage
        tokens = max(0, usage.input_tokens) + max(0, usage.output_tokens)
        # Both providers count cache reads inside the input tokens (pydantic-ai's usage).
        cached = min(max(0, usage.cache_read_tokens), max(0, usage.input_tokens))
        self.tokens += tokens
        self.cached_tokens += cached
        cost = cost_usd(usage, (response.model_name, self._model), url=self._url, instance=self._instance)
        self._tools.after_model_call(
            ModelCall(self._model, tokens=tokens, ms=_ms(start), cached_tokens=cached, cost_usd=cost)
        )
        return response

    async def on_tool_validate_error(
        self,
        ctx: RunContext[None],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: RawToolArgs,
        error: ValidationError | ModelRetry,
    ) -> ValidatedToolArgs:
        """Arguments that do not fit the tool's model: ``Tools.call`` refuses them with the
        reason (the same check, the step recorded), and the model reads that as the failed
        result, as any refusal, not as a prompt to retry."""
        result = await self._tools.call(tool_def.name, _raw(args))
        if result.is_error:
            raise ToolFailed(result.text)
        raise error  # the same model accepted them after all: pydantic-ai's own answer stands

    async def on_model_request_error(
        self, ctx: RunContext[None], *, request_context: ModelRequestContext, error: Exception
    ) -> ModelResponse:
        attempt = request_context.attempt
        if not (isinstance(error, ModelAPIError) and retryable(error)) or attempt >= self._attempts:
            raise error
        wait = retry_wait_s(error, attempt)
        log.info(
            "llm request retry",
            instance=self._instance,
            url=self._url,
            attempt=attempt,
            wait_s=wait,
            reason=self._describe(error),
        )
        await self._sleep(wait)
        raise RetryModelRequest()


def _usage_attributes(response: ModelResponse) -> dict[str, object]:
    """A model call's answer as the GenAI semantic conventions name it (its trace span)."""
    usage = response.usage
    return {
        "gen_ai.response.model": response.model_name,
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": usage.cache_read_tokens,
    }


def retryable(error: BaseException) -> bool:
    """A failed model call worth another attempt: 408, 429 and 5xx, connection errors and
    timeouts (the server was busy or unreachable). Any other status fails at once."""
    if isinstance(error, ModelHTTPError):
        return error.status_code in (408, 429) or error.status_code >= 500
    return isinstance(error, ModelConnectionError)


def retry_wait_s(error: ModelAPIError, attempt: int) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1, 2, …): what the server asked
    for (``Retry-After``/``retry-after-ms``, parsed by pydantic-ai), else backoff; capped."""
    asked = error.retry_after
    if asked is not None and asked == asked and asked >= 0:  # not NaN, not negative
        return min(float(asked), MAX_RETRY_WAIT_S)
    return backoff_s(attempt)


def _raw(args: RawToolArgs) -> object:
    """The model's arguments as an object when they are JSON at all (else as they came)."""
    if isinstance(args, str):
        try:
            return json.loads(args) if args.strip() else {}
        except ValueError:
            return args
    return args


def _ms(start: float) -> float:
    return (time.monotonic() - start) * 1000


class DraftFollower:
    """Follows the turn's first ``send_message`` call as the model streams it and hands
    the ``text`` argument so far to the turn's draft (docs/agent-surface.md)."""

    def __init__(self, draft: drafts.Draft) -> None:
        self._draft = draft
        self._args = drafts.StringFieldReader("text")
        self._part: int | None = None  # the part of the response being followed
        self._done = False  # the first send_message has been followed to its end

    async def __call__(self, ctx: RunContext[None], events: AsyncIterable[AgentStreamEvent]) -> None:
        async for event in events:
            if self._done:
                continue
            if isinstance(event, PartStartEvent):
                self._started(event)
            elif isinstance(event, PartDeltaEvent) and event.index == self._part:
                if isinstance(event.delta, ToolCallPartDelta):
                    self._grow(event.delta.args_delta)
        if self._part is not None:
            self._done = True  # a response ended: later posts are not drafted

    def _started(self, event: PartStartEvent) -> None:
        part = event.part
        if self._part is not None:
            if event.index != self._part:
                self._done = True  # the next part began: the call is whole
            return
        if isinstance(part, ToolCallPart) and part.tool_name == SEND_MESSAGE:
            self._part = event.index
            self._grow(part.args if isinstance(part.args, str) else part.args_as_dict())

    def _grow(self, delta: str | dict[str, Any] | None) -> None:
        if isinstance(delta, dict):
            text = delta.get("text")
            if isinstance(text, str):
                self._draft(text)
            return
        if not delta:
            return
        text = self._args.feed(delta)
        if text:
            self._draft(text)


@dataclass
class LoopResult:
    posts: int  # ``send_message`` calls that posted
    messages: list[ModelMessage]  # the turn's new messages (its prompt first), for its history


async def run_tool_loop(
    model: Model,
    *,
    system: str,
    prompt: str | Sequence[UserContent],
    tools: Tools,
    steps: TurnSteps,
    settings: ModelSettings,
    instance: str,
    history: Sequence[ModelMessage] = (),
) -> LoopResult:
    """Run the loop to its end, after the thread's earlier turns (``history``).

    Reaching the step limit is an end, not a failure: the messages until then are the
    turn's. ``BudgetExhausted`` and pydantic-ai's own errors propagate: the caller turns
    the latter into ``TurnFailed``.
    """
    toolset = TurnToolset(tools)
    agent: Agent[None, str | None] = Agent(
        model,
        name=f"nanoslack-{instance}",
        # Text, or nothing at all: an empty answer ends the turn (silence), it is not retried.
        output_type=[str, type(None)],
        instructions=system,
        toolsets=[toolset],
        capabilities=[steps],
        retries=TOOL_RETRIES,
        model_settings=settings,
    )
    # A turn whose reply may stream (a DM) asks the model to stream, to follow its post.
    draft = drafts.current()
    with capture_run_messages() as messages:
        try:
            await agent.run(
                prompt,
                message_history=list(history) or None,
                usage_limits=UsageLimits(request_limit=tools.max_steps),
                event_stream_handler=DraftFollower(draft) if draft is not None else None,
            )
        except UsageLimitExceeded:
            log.warning("turn step limit reached", instance=instance, steps=steps.calls)
    return LoopResult(toolset.posts, list(messages[len(history) :]))


def describe_failure(error: BaseException, *, url: str, backend: str, secrets: tuple[str, ...]) -> str:
    """A short, key-free sentence for a failed model call: the status and the server's reason."""
    if isinstance(error, ModelHTTPError):
        return f"{url} answered {error.status_code}: {_reason(error, secrets)}"
    if isinstance(error, ModelTimeoutError):
        return f"request to {url} timed out"
    if isinstance(error, ModelConnectionError):
        return f"cannot reach {url}: {_clean(error.message, secrets)}"
    # Before ModelAPIError: pydantic-ai ≥ 2.78 reports a response it cannot read as both.
    if isinstance(error, UnexpectedModelBehavior):
        return f"{backend} response has an unexpected shape: {_clean(error.message, secrets)}"
    if isinstance(error, ModelAPIError):
        return f"{backend} request failed: {_clean(error.message, secrets)}"
    if isinstance(error, AgentRunError):
        return f"{backend} run failed: {_clean(str(error), secrets)}"
    return f"{backend} request failed ({type(error).__name__})"


def _reason(error: ModelHTTPError, secrets: tuple[str, ...]) -> str:
    """The provider's error message when it has one (both APIs use ``error.message``)."""
    body = error.body
    text: object = body
    # The openai SDK hands over the ``error`` object itself, the anthropic SDK the whole body.
    inner = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(inner, dict | str):
        message = inner.get("message") if isinstance(inner, dict) else inner
        text = message if isinstance(message, str) and message else body
    cleaned = _clean(text if isinstance(text, str) else ("" if text is None else repr(text)), secrets)
    if cleaned:
        return cleaned
    try:
        return HTTPStatus(error.status_code).phrase
    except ValueError:
        return "no reason given"


def _clean(text: str, secrets: tuple[str, ...]) -> str:
    return scrub(" ".join(text.split()), secrets)[:REASON_CHARS]
