"""What the two LLM back ends share: the posting rules, the tool loop, the failures.

Each back end builds its pydantic-ai ``Model`` once (its SDK client on the fleet's shared
httpx2 client, the SDK's own retries off) and runs ``agents.loop`` for every turn. Posts
happen only through the ``send_message`` tool, so ``Reply.posts`` is always ``()``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx2
from pydantic_ai.messages import BinaryContent, UserContent
from pydantic_ai.models import Model
from pydantic_ai.profiles import ModelProfile
from pydantic_ai.settings import ModelSettings

from nanoslack.agents.http import DEFAULT_ATTEMPTS, Sleep, safe_url
from nanoslack.agents.loop import TurnSteps, describe_failure, run_tool_loop
from nanoslack.agents.prompt import opening, render_prompt
from nanoslack.agents.replay import image_id, keep, replay, size
from nanoslack.agents.types import BudgetExhausted, Reply, Tools, Turn, TurnFailed
from nanoslack.config import Secret
from nanoslack.logs import get_logger

log = get_logger("nanoslack.agents")

# Appended to the teammate's system prompt by the LLM back ends only: command and
# script agents answer on stdout / from rules and need no such rule.
POSTING_RULES = (
    "How to post: call the send_message tool to post to the conversation, once per message. "
    "Your plain text is private scratch that nobody sees. Not calling send_message is "
    "silence, and silence is fine when you have nothing useful to add. Mention a teammate "
    "as @name to hand over to them."
)
# The provider's tool schemas as given: pydantic-ai's JSON-schema transformers rewrite
# schemas for strict modes (titles dropped, properties made required), which an MCP
# server's own schema must not suffer.
RAW_SCHEMAS: ModelProfile = {"json_schema_transformer": None}


async def user_prompt(turn: Turn) -> str | list[UserContent]:
    """The turn's prompt, and after it the images of the messages it answers as image input
    (docs/agents.md "Files"): read from their downloads now, shown to this turn only (the
    kept copy names them: ``replay.keep``)."""
    prompt = render_prompt(turn)
    images = [f for f in turn.files if f.is_image]
    if not images:
        return prompt
    content: list[UserContent] = [prompt]
    for file in images:
        try:
            data = await asyncio.to_thread(Path(file.path).read_bytes)
        except OSError as exc:
            log.warning("file not shown", instance=turn.instance, file=file.id, reason=exc.strerror)
            content.append(f"[file: {file.name}: its download could not be read ({exc.strerror})]")
            continue
        content.append(BinaryContent(data=data, media_type=file.mimetype, identifier=image_id(file.name)))
    return content


def system_text(turn: Turn) -> str:
    """The opening every request of the thread starts with: persona, posting rules, notes."""
    persona = f"{turn.system.rstrip()}\n\n{POSTING_RULES}" if turn.system.strip() else POSTING_RULES
    return opening(turn, persona)


class LLMAgent:
    """Base of ``OpenAIAgent``/``AnthropicAgent``: one pydantic-ai model, a tool loop per turn."""

    name = "llm"
    # Each back end names its server's default base URL and the endpoint under it.
    DEFAULT_BASE_URL = ""
    ENDPOINT = ""

    def __init__(
        self,
        client: httpx2.AsyncClient,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str,
        instance: str,
        attempts: int = DEFAULT_ATTEMPTS,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.base_url = (base_url or self.DEFAULT_BASE_URL).rstrip("/")
        self.url = self.base_url + self.ENDPOINT
        self.model = model
        self.instance = instance
        self.attempts = attempts
        self._sleep = sleep
        self._key = Secret(api_key or "")
        self._model = self.build_model(client)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} instance={self.instance} model={self.model} url={safe_url(self.url)}>"

    def build_model(self, client: httpx2.AsyncClient) -> Model:
        raise NotImplementedError

    def model_settings(self) -> ModelSettings:
        return {}

    async def run(self, turn: Turn, tools: Tools) -> Reply:
        steps = TurnSteps(
            tools,
            instance=self.instance,
            model=self.model,
            url=safe_url(self.url),
            attempts=self.attempts,
            sleep=self._sleep,
            describe=self._describe,
            provider=self.name,
        )
        failure: str | None = None
        try:
            result = await run_tool_loop(
                self._model,
                system=system_text(turn),
                prompt=await user_prompt(turn),
                tools=tools,
                steps=steps,
                settings=self.model_settings(),
                instance=self.instance,
                history=replay(turn),
            )
        except (BudgetExhausted, TurnFailed):
            raise
        except Exception as exc:  # pydantic-ai's and the SDK's errors all end the turn here
            failure = self._describe(exc)
            if steps.attempts_of_last_call > 1:
                failure += f" (after {steps.attempts_of_last_call} attempts)"
        if failure is not None:
            # Raised outside the handler: no __context__ chain back to an error whose body
            # may echo the key.
            raise TurnFailed(failure)
        log.info(
            "agent replied",
            instance=self.instance,
            backend=self.name,
            posts=result.posts,
            steps=steps.calls,
            tokens=steps.tokens,
            cached_tokens=steps.cached_tokens,
        )
        return Reply((), steps.tokens, history=keep(result.messages), history_chars=size(result.messages))

    def _describe(self, error: BaseException) -> str:
        return describe_failure(
            error, url=safe_url(self.url), backend=self.name, secrets=(self._key.reveal(),)
        )
