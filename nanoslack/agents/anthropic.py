"""``anthropic`` back end: the Messages API (``POST {base}/v1/messages``).

One request per turn: ``system`` (persona + posting rules), one ``user`` message
(the turn prompt) and a ``send_message`` tool. Each ``tool_use`` block named
``send_message`` is one post (its ``input.text``), in order; ``text`` blocks are
private scratch; no tool use is silence. Usage = ``input_tokens + output_tokens``.
"""

from __future__ import annotations

from typing import Any

import httpx

from nanoslack.agents.llm import (
    SEND_MESSAGE,
    SEND_MESSAGE_DESCRIPTION,
    TEXT_SCHEMA,
    LLMAgent,
    as_int,
    log,
    post_text,
    system_text,
)
from nanoslack.agents.types import Turn

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 1024

SEND_MESSAGE_TOOL: dict[str, Any] = {
    "name": SEND_MESSAGE,
    "description": SEND_MESSAGE_DESCRIPTION,
    "input_schema": TEXT_SCHEMA,
}


class AnthropicAgent(LLMAgent):
    name = "anthropic"
    DEFAULT_BASE_URL = DEFAULT_BASE_URL
    ENDPOINT = "/v1/messages"

    def __init__(
        self, client: httpx.AsyncClient, *, max_tokens: int = DEFAULT_MAX_TOKENS, **options: Any
    ) -> None:
        self.max_tokens = max_tokens
        super().__init__(client, **options)

    def headers(self) -> dict[str, str]:
        return {"x-api-key": self._key.reveal(), "anthropic-version": API_VERSION}

    def request_body(self, turn: Turn) -> dict[str, Any]:
        return {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "system": system_text(turn),
            "messages": [{"role": "user", "content": self.prompt(turn)}],
            "tools": [SEND_MESSAGE_TOOL],
        }

    def posts(self, body: dict[str, Any]) -> tuple[str, ...]:
        posts: list[str] = []
        for block in body["content"]:
            if block.get("type") != "tool_use":
                continue
            if block.get("name") != SEND_MESSAGE:
                log.warning("unknown tool called", instance=self.instance, tool=block.get("name"))
                continue
            text = post_text(block.get("input"), self.instance)
            if text is not None:
                posts.append(text)
        return tuple(posts)

    def tokens(self, body: dict[str, Any]) -> int:
        usage = body.get("usage") or {}
        return as_int(usage.get("input_tokens")) + as_int(usage.get("output_tokens"))
