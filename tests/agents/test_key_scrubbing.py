"""An LLM back end's API key never reaches a failed turn's error or a log line, whatever
shape the key has (docs/agents.md).

The log's pattern masks keys shaped like OpenAI's and Anthropic's (``sk-…``); a local
server or a proxy takes any string, so the back end itself must scrub the key it was
given. Only public entry points: ``build_agent`` from configuration, ``run(turn)``.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from nanoslack.agents import TurnFailed, build_agent, make_http_client
from nanoslack.agents.local import LocalTools
from nanoslack.logs import configure_logging
from nanoslack.testing.llm_server import Answer, LLMServer, backend_env

from .conftest import Sleeps
from .helpers import make_turn

LOCAL_KEY = "local-secret-key-42"


# How servers and proxies echo a key back: the providers' error object, or plain text.
ECHOES = {
    "json": lambda status: Answer(
        status, json={"error": {"type": "authentication_error", "message": f"Invalid API key: {LOCAL_KEY}"}}
    ),
    "text": lambda status: Answer(status, text=f"Unauthorized: bearer {LOCAL_KEY} is not valid"),
}


def _chain(exc: BaseException) -> str:
    """Everything an exception carries: its text, its repr and those of its causes."""
    parts = []
    seen: BaseException | None = exc
    while seen is not None:
        parts += [str(seen), repr(seen), *map(repr, seen.args)]
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


@pytest.mark.parametrize("echo", sorted(ECHOES))
@pytest.mark.parametrize("backend", ["anthropic", "openai"])
async def test_a_local_key_echoed_by_the_server_is_in_neither_the_turn_failure_nor_the_log(
    sleeps: Sleeps, llm: LLMServer, teammates: Path, backend: str, echo: str
) -> None:
    out = io.StringIO()
    configure_logging("debug", "json", stream=out)  # every logger: ours, httpx2's, the SDKs', pydantic-ai's
    # A retryable answer first (its reason is logged before the retry), then the refusal.
    endpoint = llm.openai if backend == "openai" else llm.anthropic
    endpoint.push(ECHOES[echo](502), ECHOES[echo](401))
    async with make_http_client() as http:
        agent = build_agent(
            backend_env(backend, llm, LOCAL_KEY).get, "dana", http=http, teammates_dir=teammates, sleep=sleeps
        )
        with pytest.raises(TurnFailed) as failed:
            await agent.run(make_turn(), LocalTools())
    assert len(endpoint.requests) == 2
    assert endpoint.requests[0].headers["authorization"] == f"Bearer {LOCAL_KEY}"  # the key was sent
    assert "401" in str(failed.value) or "502" in str(failed.value), str(failed.value)
    assert LOCAL_KEY not in _chain(failed.value)
    assert [line for line in out.getvalue().splitlines() if LOCAL_KEY in line] == []
