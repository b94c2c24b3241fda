"""What the two LLM back ends share: the posting contract, the budget, the request loop."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import structlog

from nanoslack.agents.http import DEFAULT_ATTEMPTS, Sleep, post_json_with_retries, safe_url
from nanoslack.agents.prompt import render_prompt
from nanoslack.agents.types import Reply, Tools, Turn, TurnFailed
from nanoslack.config import Secret

log = structlog.get_logger("nanoslack.agents")

SEND_MESSAGE = "send_message"
SEND_MESSAGE_DESCRIPTION = (
    "Post one message to the Slack conversation you are in. Call it once per message you "
    "want people to see (at most 3). Not calling it means you stay silent."
)
TEXT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"text": {"type": "string", "description": "The message text (Slack mrkdwn)."}},
    "required": ["text"],
}
# Appended to the teammate's system prompt by the LLM back ends only: command and
# script agents answer on stdout / from rules and need no such rule.
POSTING_RULES = (
    "How to post: call the send_message tool to post to the conversation, once per message. "
    "Your plain text is private scratch that nobody sees. Not calling send_message is "
    "silence, and silence is fine when you have nothing useful to add. Mention a teammate "
    "as @name to hand over to them."
)


def system_text(turn: Turn) -> str:
    return f"{turn.system.rstrip()}\n\n{POSTING_RULES}" if turn.system.strip() else POSTING_RULES


def as_int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def post_text(args: object, instance: str) -> str | None:
    """The ``text`` argument of one send_message call, or None (logged) when unusable."""
    if isinstance(args, dict) and isinstance(args.get("text"), str):
        text = args["text"].strip()
        return text or None
    log.warning("send_message call malformed", instance=instance, arguments_type=type(args).__name__)
    return None


class LLMAgent:
    """Base of ``OpenAIAgent``/``AnthropicAgent``: one request, its usage and its posts
    (each ``send_message`` call goes to the turn's tools, which collect it)."""

    name = "llm"
    # Each back end names its server's default base URL and the endpoint under it.
    DEFAULT_BASE_URL = ""
    ENDPOINT = ""

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str,
        instance: str,
        attempts: int = DEFAULT_ATTEMPTS,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.client = client
        self.base_url = (base_url or self.DEFAULT_BASE_URL).rstrip("/")
        self.url = self.base_url + self.ENDPOINT
        self.model = model
        self.instance = instance
        self.attempts = attempts
        self._sleep = sleep
        self._key = Secret(api_key or "")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} instance={self.instance} model={self.model} url={safe_url(self.url)}>"

    def headers(self) -> dict[str, str]:
        raise NotImplementedError

    def request_body(self, turn: Turn) -> dict[str, Any]:
        raise NotImplementedError

    def posts(self, body: dict[str, Any]) -> tuple[str, ...]:
        raise NotImplementedError

    def tokens(self, body: dict[str, Any]) -> int:
        raise NotImplementedError

    async def run(self, turn: Turn, tools: Tools) -> Reply:
        tools.before_model_call()
        start = time.monotonic()
        body = await post_json_with_retries(
            self.client,
            self.url,
            self.request_body(turn),
            self.headers(),
            attempts=self.attempts,
            sleep=self._sleep,
            secrets=(self._key.reveal(),),
        )
        try:
            # Count first: tokens spent on an answer we cannot read are still spent.
            tokens = self.tokens(body)
            tools.after_model_call(model=self.model, tokens=tokens, ms=(time.monotonic() - start) * 1000)
            posts = self.posts(body)
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise TurnFailed(f"{self.name} response has an unexpected shape ({type(exc).__name__})") from exc
        for text in posts:
            await tools.call(SEND_MESSAGE, {"text": text})
        log.info("agent replied", instance=self.instance, backend=self.name, posts=len(posts), tokens=tokens)
        return Reply((), tokens)

    @staticmethod
    def prompt(turn: Turn) -> str:
        return render_prompt(turn)
