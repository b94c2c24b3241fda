"""``openai`` back end: any OpenAI-compatible Chat Completions server.

One request per turn: ``system`` (persona + posting rules) and ``user`` (the turn
prompt), with a ``send_message`` function tool and ``tool_choice="auto"``. Each
``send_message`` call in the answer is one post, in order; the message ``content``
is private scratch, never posted; no call is silence. Works against OpenAI, Ollama,
vLLM and llama.cpp (``OPENAI_BASE_URL``, no ``Authorization`` header without a key).
Arguments arrive as a JSON string per the spec; an object (as some local servers
send) is accepted too, and a malformed call is skipped with a warning.
"""

from __future__ import annotations

import json
from typing import Any

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

DEFAULT_BASE_URL = "https://api.openai.com/v1"

SEND_MESSAGE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {"name": SEND_MESSAGE, "description": SEND_MESSAGE_DESCRIPTION, "parameters": TEXT_SCHEMA},
}


class OpenAIAgent(LLMAgent):
    name = "openai"
    DEFAULT_BASE_URL = DEFAULT_BASE_URL
    ENDPOINT = "/chat/completions"

    def headers(self) -> dict[str, str]:
        key = self._key.reveal()
        return {"Authorization": f"Bearer {key}"} if key else {}

    def request_body(self, turn: Turn) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": [
                {"role": "system", "content": system_text(turn)},
                {"role": "user", "content": self.prompt(turn)},
            ],
            "tools": [SEND_MESSAGE_TOOL],
            "tool_choice": "auto",
        }

    def posts(self, body: dict[str, Any]) -> tuple[str, ...]:
        message = body["choices"][0]["message"]
        posts: list[str] = []
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            if function.get("name") != SEND_MESSAGE:
                log.warning("unknown tool called", instance=self.instance, tool=function.get("name"))
                continue
            text = post_text(_arguments(function.get("arguments")), self.instance)
            if text is not None:
                posts.append(text)
        return tuple(posts)

    def tokens(self, body: dict[str, Any]) -> int:
        usage = body.get("usage") or {}
        return as_int(usage.get("total_tokens"))


def _arguments(raw: object) -> object:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return None
    return raw
