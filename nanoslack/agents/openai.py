"""``openai`` back end: any OpenAI-compatible Chat Completions server.

pydantic-ai's ``OpenAIChatModel`` over the official ``openai`` SDK (Chat Completions, not
the Responses API, so OpenAI, Ollama, vLLM and llama.cpp all answer it). Without an API
key (``OPENAI_BASE_URL`` pointing at a local server) no ``Authorization`` header is sent
at all. The turn's tools go as function tools with ``tool_choice="auto"``; the message
``content`` is private scratch; no ``send_message`` call is silence. Arguments arrive as a
JSON string per the spec; an object (as some local servers send) is accepted too.
"""

from __future__ import annotations

import json
from typing import Any, cast

import httpx2
from openai import AsyncOpenAI, Omit
from openai.types.chat import ChatCompletion
from pydantic_ai.models import Model
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.settings import ModelSettings

from nanoslack.agents.llm import RAW_SCHEMAS, LLMAgent

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# The SDK wants some key; with this one it is never sent (see ``model_settings``).
NO_KEY = "no-key"


class OpenAIAgent(LLMAgent):
    name = "openai"
    DEFAULT_BASE_URL = DEFAULT_BASE_URL
    ENDPOINT = "/chat/completions"

    def build_model(self, client: httpx2.AsyncClient) -> Model:
        sdk = AsyncOpenAI(
            api_key=self._key.reveal() or NO_KEY,
            base_url=self.base_url,
            http_client=client,
            max_retries=0,  # the loop retries (agents.http), with waits it caps
        )
        return _ChatModel(self.model, provider=OpenAIProvider(openai_client=sdk), profile=RAW_SCHEMAS)

    def model_settings(self) -> ModelSettings:
        if self._key.reveal():
            return {}
        # The SDK's documented way to send no Authorization header: omit it per request.
        return {"extra_headers": {"Authorization": cast(str, Omit())}}


class _ChatModel(OpenAIChatModel):
    # The return type is pydantic-ai's own lenient completion, which it does not export
    # (its module is private): whatever the hook returns is handed back as it came.
    def _validate_completion(self, response: ChatCompletion) -> Any:
        """The hook pydantic-ai documents for subclasses: a tool call's ``arguments`` that
        came as an object become the JSON string the spec (and the SDK's types) expect."""
        data = response.model_dump(warnings=False)
        for choice in data.get("choices") or ():
            for call in (choice.get("message") or {}).get("tool_calls") or ():
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict) and isinstance(function.get("arguments"), dict | list):
                    function["arguments"] = json.dumps(function["arguments"])
        return super()._validate_completion(ChatCompletion.model_construct(**data))
