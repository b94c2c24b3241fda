"""Building an instance's agent from configuration; every problem names the key to fix."""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import pytest

from nanoslack.agents import (
    AnthropicAgent,
    CommandAgent,
    OpenAIAgent,
    ScriptAgent,
    build_agent,
)
from nanoslack.agents.local import LocalTools
from nanoslack.config import ConfigError, load_settings
from nanoslack.config.agent import backend_kind, daily_tokens
from nanoslack.testing.llm_server import LLMServer, openai_text

from .helpers import make_turn


def build(env: dict[str, str], instance: str, http: httpx2.AsyncClient, teammates: Path) -> object:
    # The real lookup the fleet passes: Settings.value over .env + environment.
    settings = load_settings(env_file=teammates / "absent.env", environ=env)
    return build_agent(settings.value, instance, http=http, teammates_dir=teammates)


def test_missing_backend_names_the_per_instance_key(http: httpx2.AsyncClient, teammates: Path) -> None:
    with pytest.raises(ConfigError, match=r"^NANOSLACK_AGENT_GH_BOT: no agent back end configured .*script"):
        build({}, "gh-bot", http, teammates)


def test_missing_backend_for_default_instance_names_the_bare_key(
    http: httpx2.AsyncClient, teammates: Path
) -> None:
    with pytest.raises(ConfigError, match=r"^NANOSLACK_AGENT: no agent back end"):
        build({}, "default", http, teammates)


def test_unknown_backend_names_the_key_and_the_four_choices(
    http: httpx2.AsyncClient, teammates: Path
) -> None:
    with pytest.raises(ConfigError) as failed:
        build({"NANOSLACK_AGENT_DANA": "gpt"}, "dana", http, teammates)

    assert (
        str(failed.value) == "NANOSLACK_AGENT_DANA='gpt' is not one of openai, anthropic, command, script: "
        "the fleet uses none: the instance is skipped"
    )


def test_per_instance_key_wins_over_the_bare_key(http: httpx2.AsyncClient, teammates: Path) -> None:
    env = {"NANOSLACK_AGENT": "openai", "NANOSLACK_AGENT_ELI": "command", "NANOSLACK_AGENT_COMMAND": "cat"}

    assert isinstance(build(env, "eli", http, teammates), CommandAgent)
    assert backend_kind({"NANOSLACK_AGENT": "Script"}.get, "fay") == "script"


def test_bare_key_applies_to_every_instance(http: httpx2.AsyncClient, teammates: Path) -> None:
    agent = build(
        {"NANOSLACK_AGENT": "command", "NANOSLACK_AGENT_COMMAND_DANA": "echo hi"}, "dana", http, teammates
    )

    assert isinstance(agent, CommandAgent)
    assert agent.command == "echo hi"
    assert agent.timeout == 120.0


def test_command_without_command_line_names_the_key(http: httpx2.AsyncClient, teammates: Path) -> None:
    with pytest.raises(ConfigError, match=r"^NANOSLACK_AGENT_COMMAND_DANA: required"):
        build({"NANOSLACK_AGENT_DANA": "command"}, "dana", http, teammates)


def test_command_timeout_is_configurable_and_checked(http: httpx2.AsyncClient, teammates: Path) -> None:
    env = {
        "NANOSLACK_AGENT": "command",
        "NANOSLACK_AGENT_COMMAND": "cat",
        "NANOSLACK_AGENT_TIMEOUT_DANA": "2.5",
    }
    agent = build(env, "dana", http, teammates)
    assert isinstance(agent, CommandAgent) and agent.timeout == 2.5

    env["NANOSLACK_AGENT_TIMEOUT_DANA"] = "soon"
    with pytest.raises(ConfigError, match=r"^NANOSLACK_AGENT_TIMEOUT_DANA: expected a number of seconds > 0"):
        build(env, "dana", http, teammates)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_llm_backend_without_model_names_the_key(
    http: httpx2.AsyncClient, teammates: Path, kind: str
) -> None:
    with pytest.raises(ConfigError, match=r"^NANOSLACK_MODEL_DANA: required"):
        build({"NANOSLACK_AGENT_DANA": kind, "ANTHROPIC_API_KEY": "k"}, "dana", http, teammates)


def test_anthropic_without_api_key_names_the_key(http: httpx2.AsyncClient, teammates: Path) -> None:
    with pytest.raises(ConfigError, match=r"^ANTHROPIC_API_KEY: required"):
        build({"NANOSLACK_AGENT_DANA": "anthropic", "NANOSLACK_MODEL": "claude"}, "dana", http, teammates)


async def test_openai_is_built_with_base_url_model_and_cap(
    http: httpx2.AsyncClient, teammates: Path, llm: LLMServer
) -> None:
    env = {
        "NANOSLACK_AGENT": "openai",
        "NANOSLACK_MODEL": "gpt-x",
        "NANOSLACK_MODEL_DANA": "llama3",
        "OPENAI_BASE_URL": llm.openai_url,
        "NANOSLACK_DAILY_TOKENS_DANA": "5000",
    }

    agent = build(env, "dana", http, teammates)

    assert isinstance(agent, OpenAIAgent)
    assert (agent.model, agent.url) == ("llama3", f"{llm.openai_url}/chat/completions")
    # The cap is the turns' to enforce, per instance key first.
    assert daily_tokens(lambda key: env.get(key), "dana") == 5000
    llm.openai.push(openai_text())
    await agent.run(make_turn(), LocalTools())
    (request,) = llm.openai.requests
    assert request.json["model"] == "llama3"
    assert "authorization" not in request.headers  # no OPENAI_API_KEY: a local server


def test_anthropic_is_built_with_default_base_url(http: httpx2.AsyncClient, teammates: Path) -> None:
    env = {
        "NANOSLACK_AGENT": "anthropic",
        "NANOSLACK_MODEL": "claude-x",
        "ANTHROPIC_API_KEY": "sk-ant-xyz123456",
    }

    agent = build(env, "dana", http, teammates)

    assert isinstance(agent, AnthropicAgent)
    assert agent.url == "https://api.anthropic.com/v1/messages"
    assert daily_tokens(lambda key: env.get(key), "dana") is None
    assert "sk-ant-xyz123456" not in repr(agent)


@pytest.mark.parametrize("value", ["0", "-5", "lots", "1.5"])
def test_malformed_daily_tokens_names_the_key(http: httpx2.AsyncClient, teammates: Path, value: str) -> None:
    env = {"NANOSLACK_AGENT": "openai", "NANOSLACK_MODEL": "m", "NANOSLACK_DAILY_TOKENS": value}

    with pytest.raises(ConfigError, match=r"^NANOSLACK_DAILY_TOKENS: expected an integer > 0"):
        build(env, "dana", http, teammates)


def test_malformed_base_url_names_the_key(http: httpx2.AsyncClient, teammates: Path) -> None:
    env = {"NANOSLACK_AGENT": "openai", "NANOSLACK_MODEL": "m", "OPENAI_BASE_URL": "localhost:11434"}

    with pytest.raises(ConfigError, match=r"^OPENAI_BASE_URL: expected an http\(s\) URL"):
        build(env, "dana", http, teammates)


def test_script_reads_the_teammate_folder_by_default(http: httpx2.AsyncClient, teammates: Path) -> None:
    (teammates / "dana" / "script.json").write_text(json.dumps({"rules": []}))

    agent = build({"NANOSLACK_AGENT": "script"}, "dana", http, teammates)

    assert isinstance(agent, ScriptAgent)
    assert agent.rules_path == teammates / "dana" / "script.json"


def test_script_path_key_overrides_the_default(
    http: httpx2.AsyncClient, teammates: Path, tmp_path: Path
) -> None:
    rules = tmp_path / "elsewhere.json"
    rules.write_text(json.dumps({"rules": []}))

    agent = build(
        {"NANOSLACK_AGENT": "script", "NANOSLACK_AGENT_SCRIPT_DANA": str(rules)}, "dana", http, teammates
    )

    assert isinstance(agent, ScriptAgent) and agent.rules_path == rules


def test_script_without_rules_file_names_the_key_and_the_file(
    http: httpx2.AsyncClient, teammates: Path
) -> None:
    with pytest.raises(ConfigError, match=r"^NANOSLACK_AGENT_SCRIPT_ELI: .*eli/script.json: cannot read"):
        build({"NANOSLACK_AGENT": "script"}, "eli", http, teammates)


def test_sample_crew_builds_with_the_script_backend(http: httpx2.AsyncClient) -> None:
    repo_teammates = Path(__file__).resolve().parents[2] / "teammates"
    for name in ("dana", "eli", "fay"):
        agent = build({"NANOSLACK_AGENT": "script"}, name, http, repo_teammates)
        assert isinstance(agent, ScriptAgent)
