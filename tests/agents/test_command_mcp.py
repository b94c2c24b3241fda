"""The ``command`` back end's process gets the turn's host tools over MCP (docs/agents.md).

Real subprocesses run by the real ``CommandAgent``, a real ``HostToolServer`` (uvicorn on
127.0.0.1), the real ``mcp`` client library on the agent's side, and the fleet's own
``TurnToolbox`` on a real SQLite store behind it: what the agent does through MCP is what
the toolbox collects for the turn's recorder.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx2
import pytest
from structlog.testing import capture_logs

from nanoslack.agents import CommandAgent, LocalTools, ToolResult, TurnFailed
from nanoslack.agents.tool import AnyArguments, Tool
from nanoslack.config import ToolSettings
from nanoslack.services import Services
from nanoslack.store import Store
from nanoslack.testing.llm_server import LLMServer, openai_text
from nanoslack.tools import Handoff, Toolboxes, TurnToolbox
from nanoslack.tools.serve import HostToolServer

from .helpers import make_turn

PY = shlex.quote(sys.executable)
MCP_AGENT = Path(__file__).with_name("mcp_agent.py")
HOST_TOOLS = ["send_message", "read_skill", "send_to_agent", "message_owner", "react", "send_file"]
# A client's first request: the initialize handshake of the 2025 protocol.
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream"}


class FilesServer:
    """A teammate's MCP server as the toolbox sees one (``tools.McpTools``): its tools are
    the model's, not the host's, so the command agent's endpoint must not offer them."""

    def tools(self) -> Sequence[Tool[Any]]:
        return [
            Tool(
                "files_read",
                "Read a file.",
                AnyArguments,
                self._read,
                origin="mcp:files",
                parameters={"type": "object"},
            )
        ]

    async def _read(self, arguments: AnyArguments) -> ToolResult:
        raise AssertionError("a command agent reached a teammate's MCP tool through the host endpoint")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open("sqlite:///" + str(tmp_path / "nanoslack.db"))
    yield s
    s.close()


@pytest.fixture
async def server() -> AsyncIterator[HostToolServer]:
    srv = HostToolServer()
    yield srv
    await srv.stop()


def toolbox(store: Store, teammates: Path, **settings: Any) -> TurnToolbox:
    """A turn's toolbox as an instance's core builds it: dana may hand off to eli."""
    turn = make_turn()
    turn_id = store.turns.start(
        instance="dana",
        channel=turn.channel,
        thread_key=turn.thread_ts,
        reply_thread_ts=turn.thread_ts,
        sender_id=turn.sender_id,
        through_ts=turn.thread_ts,
        messages=1,
        wrapping_up=False,
    )
    services = Services(
        store,
        teammates,
        siblings=dict,
        limiter=asyncio.Semaphore(1),
        owners=("U0OWNER",),
        tools=ToolSettings(allow=frozenset({("dana", "eli")}), **settings),
    )
    boxes = Toolboxes(services, instance="dana", skills_dir=teammates / "_skills", mcp=FilesServer())
    return boxes.for_turn(turn_id, turn, [])


def mcp_agent(tmp_path: Path, **plan: dict[str, Any]) -> str:
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    return f"{PY} {shlex.quote(str(MCP_AGENT))} {shlex.quote(str(tmp_path / 'plan.json'))}"


def mcp_turns(tmp_path: Path) -> list[dict[str, Any]]:
    log = tmp_path / "mcp_turns.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def script(tmp_path: Path, body: str, name: str = "agent.py") -> str:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return f"{PY} {shlex.quote(str(path))}"


async def test_a_command_agent_reads_a_skill_and_hands_off_through_the_mcp_endpoint(
    tmp_path: Path, teammates: Path, store: Store, server: HostToolServer
) -> None:
    command = mcp_agent(
        tmp_path,
        dana={
            "calls": [
                ["read_skill", {"name": "review"}],
                ["send_to_agent", {"to": "eli", "message": "review the release plan"}],
                ["send_message", {"text": "asked eli to review"}],
                ["files_read", {"path": "/etc/passwd"}],
            ],
            "reply": "the skill says: {0}",
        },
    )
    tools = toolbox(store, teammates)

    reply = await CommandAgent(command, instance="dana", mcp=server).run(make_turn(), tools)

    (turn,) = mcp_turns(tmp_path)
    assert turn["tools"] == HOST_TOOLS  # the host's four; the teammate's MCP tools are the model's
    skill, handoff, post, other = turn["results"]
    assert skill == {"tool": "read_skill", "text": "# Review: look for failure paths\n", "is_error": False}
    assert handoff["is_error"] is False and "handed to eli" in handoff["text"]
    assert post == {"tool": "send_message", "text": "posted", "is_error": False}
    assert other == {"tool": "files_read", "text": "unknown tool 'files_read'", "is_error": True}
    # What the process said through MCP is the turn's, for the recorder to commit with it:
    # its send_message post goes with (before) the stdout posts, its handoff with the turn.
    assert tools.effects.posts == ["asked eli to review"]
    assert reply.posts == ("the skill says: # Review: look for failure paths",)
    assert tools.effects.handoffs == [Handoff("eli", "review the release plan")]
    steps = [(s.kind, s.name, s.error) for s in store.steps.of(tools.turn_id)]
    assert steps == [
        ("tool", "read_skill", None),
        ("tool", "send_to_agent", None),
        ("tool", "send_message", None),
    ]


async def test_a_refused_handoff_reaches_the_agent_as_a_result_saying_why(
    tmp_path: Path, teammates: Path, store: Store, server: HostToolServer
) -> None:
    command = mcp_agent(tmp_path, dana={"calls": [["send_to_agent", {"to": "fay", "message": "x"}]]})
    tools = toolbox(store, teammates)

    await CommandAgent(command, instance="dana", mcp=server).run(make_turn(), tools)

    ((result,),) = [t["results"] for t in mcp_turns(tmp_path)]
    assert result["is_error"] is True
    assert "dana may not hand off to fay" in result["text"]
    assert tools.effects.handoffs == []


async def test_a_wrong_or_missing_token_is_refused_with_401(
    tmp_path: Path, teammates: Path, store: Store, server: HostToolServer
) -> None:
    # The agent's own process tries the endpoint with a wrong token, none, another
    # scheme, then its own: only its own is let in.
    command = script(
        tmp_path,
        "import json, os, sys, urllib.request, urllib.error\n"
        "url, token = os.environ['NANOSLACK_MCP_URL'], os.environ['NANOSLACK_MCP_TOKEN']\n"
        f"body = json.dumps({INITIALIZE!r}).encode()\n"
        "def status(auth):\n"
        f"    headers = {{'Content-Type': 'application/json', **{ACCEPT!r}}}\n"
        "    if auth is not None:\n"
        "        headers['Authorization'] = auth\n"
        "    req = urllib.request.Request(url, data=body, headers=headers, method='POST')\n"
        "    try:\n"
        "        with urllib.request.urlopen(req, timeout=10) as resp:\n"
        "            return str(resp.status)\n"
        "    except urllib.error.HTTPError as exc:\n"
        "        return str(exc.code)\n"
        "print(status('Bearer ' + token[::-1]), status(None), status('Basic ' + token),\n"
        "      status('Bearer ' + token))\n",
    )

    reply = await CommandAgent(command, instance="dana", mcp=server).run(
        make_turn(), toolbox(store, teammates)
    )

    assert reply.posts == ("401 401 401 200",)


async def test_a_token_is_refused_once_its_turn_has_ended(
    tmp_path: Path, teammates: Path, store: Store, server: HostToolServer
) -> None:
    seen = tmp_path / "seen.jsonl"
    command = script(
        tmp_path,
        "import json, os\n"
        f"with open({str(seen)!r}, 'a') as f:\n"
        "    env = os.environ\n"
        "    f.write(json.dumps([env['NANOSLACK_MCP_URL'], env['NANOSLACK_MCP_TOKEN']]) + '\\n')\n",
    )
    agent = CommandAgent(command, instance="dana", mcp=server)
    await agent.run(make_turn(), toolbox(store, teammates))
    await agent.run(make_turn(), toolbox(store, teammates))

    (url, first), (url2, second) = (json.loads(line) for line in seen.read_text().splitlines())
    assert url == url2 and url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
    assert first != second  # a fresh token every turn
    async with httpx2.AsyncClient() as http:
        for token in (first, second):
            resp = await http.post(
                url, json=INITIALIZE, headers={**ACCEPT, "Authorization": f"Bearer {token}"}
            )
            assert resp.status_code == 401
            assert resp.headers["www-authenticate"].startswith("Bearer")


async def test_a_cancelled_turn_revokes_its_token(
    tmp_path: Path, teammates: Path, store: Store, server: HostToolServer
) -> None:
    seen = tmp_path / "token"
    command = script(
        tmp_path,
        "import os, time\n"
        f"open({str(seen) + '.tmp'!r}, 'w').write(os.environ['NANOSLACK_MCP_TOKEN'])\n"
        f"os.rename({str(seen) + '.tmp'!r}, {str(seen)!r})\n"
        "time.sleep(60)\n",
    )
    task = asyncio.create_task(
        CommandAgent(command, instance="dana", mcp=server).run(make_turn(), toolbox(store, teammates))
    )
    deadline = time.monotonic() + 15
    while not seen.exists():
        assert time.monotonic() < deadline, "the agent never started"
        await asyncio.sleep(0.02)
    token = seen.read_text()
    headers = {**ACCEPT, "Authorization": f"Bearer {token}"}
    assert server.url is not None
    async with httpx2.AsyncClient() as http:
        assert (await http.post(server.url, json=INITIALIZE, headers=headers)).status_code == 200

        task.cancel()  # a halt, a shutdown
        await asyncio.gather(task, return_exceptions=True)

        assert (await http.post(server.url, json=INITIALIZE, headers=headers)).status_code == 401


async def test_the_modern_mcp_client_gets_the_same_tools(
    teammates: Path, store: Store, server: HostToolServer
) -> None:
    """The ``mcp`` package's own default (``auto``: the 2026 protocol where the server has
    it) works too, not only the initialize handshake the CLIs use."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    tools = toolbox(store, teammates)
    async with server.grant(tools, instance="dana") as endpoint:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {endpoint.token}"}) as http:
            async with Client(streamable_http_client(endpoint.url, http_client=http)) as client:
                offered = (await client.list_tools()).tools
                result = await client.call_tool("message_owner", {"text": "the plan is ready"})

    assert [t.name for t in offered] == HOST_TOOLS
    # read_skill says it changes nothing, so a CLI that asks before tools with effects need not.
    read_only = {t.name for t in offered if t.annotations and t.annotations.read_only_hint}
    assert read_only == {"read_skill"}
    assert result.is_error is False
    assert tools.effects.owner_messages == ["the plan is ready"]


async def test_the_token_never_reaches_a_log_line_an_error_or_a_post(
    tmp_path: Path, teammates: Path, store: Store, server: HostToolServer
) -> None:
    leaky = script(
        tmp_path, "import os, sys\nprint('token:', os.environ['NANOSLACK_MCP_TOKEN'])\n", "leaky.py"
    )
    failing = script(
        tmp_path,
        "import os, sys\nsys.stderr.write('Authorization: Bearer ' + os.environ['NANOSLACK_MCP_TOKEN'])\n"
        "sys.exit(2)\n",
        "failing.py",
    )
    tokens: list[str] = []
    real_grant = server.grant

    def spy(tools: Any, *, instance: str) -> Any:
        cm = real_grant(tools, instance=instance)

        class Spy:
            async def __aenter__(self) -> Any:
                endpoint = await cm.__aenter__()
                tokens.append(endpoint.token)
                return endpoint

            async def __aexit__(self, *exc: Any) -> Any:
                return await cm.__aexit__(*exc)

        return Spy()

    server.grant = spy  # type: ignore[method-assign]
    with capture_logs() as logs:
        reply = await CommandAgent(leaky, instance="dana", mcp=server).run(
            make_turn(), toolbox(store, teammates)
        )
        with pytest.raises(TurnFailed) as failed:
            await CommandAgent(failing, instance="dana", mcp=server).run(
                make_turn(), toolbox(store, teammates)
            )

    assert len(tokens) == 2
    assert reply.posts == ("token: ***",)
    assert "Bearer ***" in str(failed.value)
    assert all(token not in str(failed.value) for token in tokens)
    assert all(token not in repr(entry) for entry in logs for token in tokens)
    assert any(entry["event"] == "mcp host tools serving" for entry in logs)


async def test_a_proxy_in_the_environment_is_not_asked_for_the_loopback_endpoint(
    tmp_path: Path, teammates: Path, store: Store, server: HostToolServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NO_PROXY", "internal.example")
    monkeypatch.delenv("no_proxy", raising=False)
    command = 'printf "%s|%s" "$NO_PROXY" "$no_proxy"'

    reply = await CommandAgent(command, instance="dana", mcp=server).run(
        make_turn(), toolbox(store, teammates)
    )

    assert reply.posts == ("internal.example,127.0.0.1|127.0.0.1",)


async def test_without_a_server_the_process_gets_no_mcp_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Not even ones the fleet itself inherited (a fleet run under another's command agent).
    monkeypatch.setenv("NANOSLACK_MCP_URL", "http://127.0.0.1:1/mcp")
    monkeypatch.setenv("NANOSLACK_MCP_TOKEN", "inherited")
    command = 'printf "[%s][%s]" "${NANOSLACK_MCP_URL-unset}" "${NANOSLACK_MCP_TOKEN-unset}"'

    reply = await CommandAgent(command, instance="dana").run(make_turn(), LocalTools())

    assert reply.posts == ("[unset][unset]",)


async def test_one_endpoint_serves_every_turn_and_stops_with_the_fleet(
    tmp_path: Path, teammates: Path, store: Store
) -> None:
    server = HostToolServer()
    command = 'printf "%s" "$NANOSLACK_MCP_URL"'
    first = await CommandAgent(command, instance="dana", mcp=server).run(
        make_turn(), toolbox(store, teammates)
    )
    second = await CommandAgent(command, instance="eli", mcp=server).run(
        make_turn(), toolbox(store, teammates)
    )
    assert first.posts == second.posts == (server.url,)
    url = server.url
    assert url is not None

    await server.stop()

    async with httpx2.AsyncClient() as http:
        with pytest.raises(httpx2.ConnectError):
            await http.post(url, json=INITIALIZE, headers=ACCEPT)
    with pytest.raises(TurnFailed):
        await CommandAgent(command, instance="dana", mcp=server).run(make_turn(), toolbox(store, teammates))


async def test_the_mcp_endpoint_and_the_model_see_the_same_schema_from_each_tools_model(
    teammates: Path, store: Store, server: HostToolServer, llm: LLMServer
) -> None:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from nanoslack.agents import OpenAIAgent
    from nanoslack.agents.tool import SendMessage

    tools = toolbox(store, teammates)
    async with server.grant(tools, instance="dana") as endpoint:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {endpoint.token}"}) as http:
            async with Client(streamable_http_client(endpoint.url, http_client=http)) as client:
                over_mcp = {t.name: t.input_schema for t in (await client.list_tools()).tools}
    llm.openai.push(openai_text(""))
    async with httpx2.AsyncClient() as http:
        agent = OpenAIAgent(
            http, base_url=llm.openai_url, api_key="sk-test", model="gpt-test", instance="dana"
        )
        await agent.run(make_turn(), toolbox(store, teammates))
    to_model = {
        t["function"]["name"]: t["function"]["parameters"] for t in llm.openai.requests[0].json["tools"]
    }

    assert list(over_mcp) == HOST_TOOLS
    assert over_mcp == {name: to_model[name] for name in HOST_TOOLS}
    assert over_mcp == {t.name: t.schema() for t in tools.tools() if t.origin == "host"}
    assert over_mcp["send_message"] == {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "The message text (Slack mrkdwn)."}},
        "required": ["text"],
    }
    assert (
        SendMessage.model_json_schema()["properties"]["text"]["description"]
        == "The message text (Slack mrkdwn)."
    )


async def test_a_call_over_mcp_that_does_not_fit_the_tools_model_is_refused_with_the_reason(
    teammates: Path, store: Store, server: HostToolServer
) -> None:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    tools = toolbox(store, teammates)
    async with server.grant(tools, instance="dana") as endpoint:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {endpoint.token}"}) as http:
            async with Client(streamable_http_client(endpoint.url, http_client=http)) as client:
                result = await client.call_tool("send_to_agent", {"to": "eli", "message": 42})

    assert result.is_error is True
    (text,) = [getattr(block, "text", "") for block in result.content]
    assert text == "not done: the arguments do not fit send_to_agent: message: Input should be a valid string"
    assert tools.effects.handoffs == []
    (step,) = store.steps.of(tools.turn_id)
    assert (step.kind, step.name, step.error) == ("tool", "send_to_agent", text)
