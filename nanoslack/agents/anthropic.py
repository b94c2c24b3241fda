"""``anthropic`` back end: the Messages API (``POST {base}/v1/messages``).

pydantic-ai's ``AnthropicModel`` over the official ``anthropic`` SDK, which sets the
API version and the key's header itself. ``max_tokens`` is 1024 per model call; ``text``
blocks are private scratch; no ``send_message`` tool use is silence. Every request marks
prompt-cache breakpoints on the system prompt, the tools and the end of the messages
(docs/memory.md "A prefix that caches"): a thread's next request reads them back.
"""

from __future__ import annotations

from typing import Any

import httpx2
from anthropic import AsyncAnthropic
from pydantic_ai.models import Model
from pydantic_ai.models.anthropic import AnthropicModel, AnthropicModelSettings
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.settings import ModelSettings

from nanoslack.agents.llm import RAW_SCHEMAS, LLMAgent

DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_MAX_TOKENS = 1024


class AnthropicAgent(LLMAgent):
    name = "anthropic"
    DEFAULT_BASE_URL = DEFAULT_BASE_URL
    ENDPOINT = "/v1/messages"

    def __init__(
        self, client: httpx2.AsyncClient, *, max_tokens: int = DEFAULT_MAX_TOKENS, **options: Any
    ) -> None:
        self.max_tokens = max_tokens
        super().__init__(client, **options)

    def build_model(self, client: httpx2.AsyncClient) -> Model:
        sdk = AsyncAnthropic(
            api_key=self._key.reveal(),
            base_url=self.base_url,
            http_client=client,
            max_retries=0,  # the loop retries (agents.http), with waits it caps
        )
        return AnthropicModel(
            self.model, provider=AnthropicProvider(anthropic_client=sdk), profile=RAW_SCHEMAS
        )

    def model_settings(self) -> ModelSettings:
        settings: AnthropicModelSettings = {
            "max_tokens": self.max_tokens,
            "anthropic_cache_instructions": True,
            "anthropic_cache_tool_definitions": True,
            # Per block on the last message, not the top-level automatic cache_control:
            # Anthropic-compatible gateways understand the former.
            "anthropic_cache_messages": True,
        }
        return settings
