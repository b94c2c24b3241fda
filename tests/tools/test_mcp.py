"""A teammate's MCP servers (``nanoslack.tools.mcp``) against real servers written with
the ``mcp`` package: a stdio subprocess (``tests/mcp_servers/echo.py``) and the same
tools over streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import structlog

from nanoslack.tools.mcp import SHARED_FILE, McpConfigError, TeammateMcp, load_mcp_config, parse_mcp_file

from .mcp_helpers import echo_server, http_echo, teammate_mcp, until, write_config

SECRET = "s3cret-value-7781"


@pytest.fixture
def teammates(tmp_path: Path) -> Path:
    return tmp_path / "teammates"


@pytest.fixture
async def stopper() -> AsyncIterator[list[TeammateMcp]]:
    """Every TeammateMcp a test starts is stopped, pass or fail."""
    started: list[TeammateMcp] = []
    yield started
    for mcp in started:
        await mcp.stop()


async def test_a_stdio_tool_result_comes_back_through_call(
    teammates: Path, stopper: list[TeammateMcp]
) -> None:
    write_config(teammates / "dana" / "mcp.json", {"echo": echo_server()})
    mcp = teammate_mcp(teammates)
    stopper.append(mcp)
    await mcp.start()

    offered = {s.name: s for s in mcp.tools()}
    assert {"echo_echo", "echo_env", "echo_pid", "echo_slow", "echo_fail"} <= set(offered)
    assert offered["echo_echo"].origin == "mcp:echo"
    assert offered["echo_echo"].description == "Give the text back."
    assert offered["echo_echo"].schema()["required"] == ["text"]

    result = await mcp.call("echo_echo", {"text": "hello"})
    assert (result.text, result.is_error) == ("echo: hello", False)


async def test_a_tool_that_raises_is_an_error_result(teammates: Path, stopper: list[TeammateMcp]) -> None:
    write_config(teammates / "dana" / "mcp.json", {"echo": echo_server()})
    mcp = teammate_mcp(teammates)
    stopper.append(mcp)
    await mcp.start()

    result = await mcp.call("echo_fail", {"message": "boom"})

    assert result.is_error
    assert (await mcp.call("echo_echo", {"text": "still here"})).text == "echo: still here"


async def test_a_slow_call_times_out_with_an_error_saying_so(
    teammates: Path, stopper: list[TeammateMcp]
) -> None:
    write_config(teammates / "dana" / "mcp.json", {"echo": echo_server()})
    mcp = teammate_mcp(teammates, timeout=0.5)
    stopper.append(mcp)
    await mcp.start()

    result = await mcp.call("echo_slow", {"seconds": 30})

    assert result.is_error
    assert "did not answer within 0.5 s" in result.text and "NANOSLACK_TOOL_TIMEOUT" in result.text
    assert (await mcp.call("echo_echo", {"text": "next"})).text == "echo: next"


async def test_a_server_that_cannot_start_leaves_the_others_working(
    teammates: Path, stopper: list[TeammateMcp]
) -> None:
    write_config(
        teammates / "dana" / "mcp.json",
        {
            "echo": echo_server(),
            "broken": echo_server(env={"ECHO_EXIT": "1", "ECHO_STDERR": "bad token ${TOKEN} refused"}),
            "missing": {"command": str(teammates / "no-such-server")},
        },
    )
    mcp = teammate_mcp(teammates, env={"TOKEN": SECRET})
    stopper.append(mcp)

    with structlog.testing.capture_logs() as logs:
        await mcp.start()

    assert (await mcp.call("echo_echo", {"text": "ok"})).text == "echo: ok"
    assert {s.origin for s in mcp.tools()} == {"mcp:echo"}
    down = {e["server"]: e for e in logs if e["event"] == "mcp server unavailable"}
    assert set(down) == {"broken", "missing"}
    assert all(e["instance"] == "dana" and e["reason"] for e in down.values())
    assert "FileNotFoundError" in down["missing"]["reason"] or "No such file" in down["missing"]["reason"]
    # The server's stderr says why, with the secret it was given masked.
    assert down["broken"]["stderr"] == "bad token *** refused"
    assert SECRET not in repr(logs)
    unknown = await mcp.call("broken_echo", {"text": "x"})
    assert unknown.is_error


async def test_a_killed_server_is_restarted_and_its_tools_come_back(
    teammates: Path, stopper: list[TeammateMcp]
) -> None:
    write_config(teammates / "dana" / "mcp.json", {"echo": echo_server()})
    mcp = teammate_mcp(teammates)
    stopper.append(mcp)
    await mcp.start()
    first = int((await mcp.call("echo_pid", {})).text)

    with structlog.testing.capture_logs() as logs:
        os.kill(first, signal.SIGKILL)
        await until(lambda: not mcp.tools(), what="the dead server's tools withdrawn")
        await until(lambda: mcp.connected("echo"), what="the server restarted")

    second = int((await mcp.call("echo_pid", {})).text)
    assert second != first
    assert (await mcp.call("echo_echo", {"text": "back"})).text == "echo: back"
    events = [e["event"] for e in logs if e.get("server") == "echo"]
    assert events[:1] == ["mcp server died"] and "mcp server started" in events


async def test_a_variable_in_env_reaches_the_server_and_is_masked_in_results(
    teammates: Path, stopper: list[TeammateMcp], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN_CANARY", "xoxb-not-for-servers")
    write_config(
        teammates / "dana" / "mcp.json", {"echo": echo_server(env={"API_TOKEN": "${TOKEN}", "MODE": "plain"})}
    )
    mcp = teammate_mcp(teammates, env={"TOKEN": SECRET})
    stopper.append(mcp)
    await mcp.start()

    assert (await mcp.call("echo_env", {"name": "MODE"})).text == "plain"
    # The server got the value (it echoes it), the model never reads it.
    assert (await mcp.call("echo_env", {"name": "API_TOKEN"})).text == "***"
    # The fleet's own settings are not inherited by the server.
    assert (await mcp.call("echo_env", {"name": "SLACK_BOT_TOKEN_CANARY"})).text == "<unset>"


def test_a_missing_variable_names_the_server_and_the_variable(teammates: Path) -> None:
    path = write_config(
        teammates / "dana" / "mcp.json",
        {
            "github": {
                "url": "https://mcp.example.test/mcp",
                "headers": {"Authorization": "Bearer ${GH_TOKEN}"},
            },
            "echo": echo_server(),
        },
    )

    config = load_mcp_config(teammates, "dana", {}.get)

    assert [s.name for s in config.servers] == ["echo"]
    (error,) = config.errors
    assert error.server == "github"
    assert str(path) in str(error) and "${GH_TOKEN}" in str(error) and "headers.Authorization" in str(error)


async def test_a_missing_variable_is_logged_as_the_server_unavailable(
    teammates: Path, stopper: list[TeammateMcp]
) -> None:
    write_config(teammates / "dana" / "mcp.json", {"echo": echo_server(env={"KEY": "${NOPE}"})})
    mcp = teammate_mcp(teammates)
    stopper.append(mcp)

    with structlog.testing.capture_logs() as logs:
        await mcp.start()

    (line,) = [e for e in logs if e["event"] == "mcp server unavailable"]
    assert line["server"] == "echo" and line["instance"] == "dana" and "${NOPE}" in line["reason"]
    assert mcp.tools() == []


def test_the_instance_file_wins_over_the_shared_one_on_a_name_clash(teammates: Path) -> None:
    write_config(
        teammates / SHARED_FILE,
        {"echo": echo_server(args=["shared"]), "notes": echo_server(), "fs": echo_server()},
    )
    write_config(teammates / "dana" / "mcp.json", {"echo": echo_server(approval="owner")})

    dana = {s.name: s for s in load_mcp_config(teammates, "dana", {}.get).servers}
    eli = {s.name: s for s in load_mcp_config(teammates, "eli", {}.get).servers}

    assert set(dana) == set(eli) == {"echo", "notes", "fs"}
    assert dana["echo"].approval and dana["echo"].args != ("shared",)
    assert not eli["echo"].approval and eli["echo"].args == ("shared",)
    assert dana["echo"].source == teammates / "dana" / "mcp.json"


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("{not json", "not valid JSON (line 1"),
        ('{"servers": {}}', '"mcpServers"'),
        ('{"mcpServers": {"a": {"command": "x", "url": "http://h/mcp"}}}', 'either "command"'),
        ('{"mcpServers": {"a": {}}}', 'either "command"'),
        ('{"mcpServers": {"a b": {"command": "x"}}}', "server name"),
        ('{"mcpServers": {"a": {"command": "x", "args": "y"}}}', '"args" must be a list'),
        ('{"mcpServers": {"a": {"command": "x", "approval": "yes"}}}', '"approval" must be'),
        ('{"mcpServers": {"a": {"url": "ftp://h"}}}', '"url" must be'),
        ('{"mcpServers": {"a": {"command": "x", "tools": {"t": "owner"}}}}', '"tools"."t"'),
        ('{"mcpServers": {"a": {"command": "x", "evn": {}}}}', "unknown key 'evn'"),
    ],
)
def test_a_malformed_file_is_an_error_naming_the_file_and_what_is_wrong(
    tmp_path: Path, text: str, what: str
) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(text, encoding="utf-8")

    with pytest.raises(McpConfigError) as raised:
        parse_mcp_file(path, {}.get)

    assert str(path) in str(raised.value) and what in str(raised.value)


def test_a_malformed_instance_file_leaves_the_shared_servers(teammates: Path) -> None:
    write_config(teammates / SHARED_FILE, {"notes": echo_server()})
    (teammates / "dana").mkdir()
    (teammates / "dana" / "mcp.json").write_text("{oops", encoding="utf-8")

    config = load_mcp_config(teammates, "dana", {}.get)

    assert [s.name for s in config.servers] == ["notes"]
    (error,) = config.errors
    assert error.server is None and "dana/mcp.json" in str(error)


async def test_a_malformed_file_is_logged_and_the_fleet_goes_on(
    teammates: Path, stopper: list[TeammateMcp]
) -> None:
    (teammates / "dana").mkdir(parents=True)
    (teammates / "dana" / "mcp.json").write_text("[]", encoding="utf-8")
    mcp = teammate_mcp(teammates)
    stopper.append(mcp)

    with structlog.testing.capture_logs() as logs:
        await mcp.start()

    (line,) = [e for e in logs if e["event"] == "mcp config invalid"]
    assert "dana/mcp.json" in line["error"] and line["instance"] == "dana"
    assert mcp.tools() == []


async def test_approval_owner_on_a_server_or_a_tool_needs_approval(
    teammates: Path, stopper: list[TeammateMcp]
) -> None:
    write_config(
        teammates / "dana" / "mcp.json",
        {
            "guarded": echo_server(approval="owner", tools={"echo": {"approval": "none"}}),
            "open": echo_server(tools={"fail": {"approval": "owner"}}),
        },
    )
    mcp = teammate_mcp(teammates)
    stopper.append(mcp)
    await mcp.start()

    assert mcp.needs_approval("guarded_pid") and not mcp.needs_approval("guarded_echo")
    assert mcp.needs_approval("open_fail") and not mcp.needs_approval("open_echo")
    assert not mcp.needs_approval("nobody_echo")


async def test_a_streamable_http_server_gets_its_header_from_a_variable(
    teammates: Path, stopper: list[TeammateMcp]
) -> None:
    async with http_echo(SECRET) as url:
        write_config(
            teammates / "dana" / "mcp.json",
            {
                "remote": {"url": url, "headers": {"Authorization": "Bearer ${REMOTE_TOKEN}"}},
                "wrongkey": {"url": url, "headers": {"Authorization": "Bearer not-it"}},
            },
        )
        mcp = teammate_mcp(teammates, env={"REMOTE_TOKEN": SECRET})
        stopper.append(mcp)

        with structlog.testing.capture_logs() as logs:
            await mcp.start()
        result = await mcp.call("remote_echo", {"text": "over http"})
        failed = await mcp.call("remote_fail", {"message": "nope"})
        await mcp.stop()

    assert (result.text, result.is_error) == ("echo: over http", False)
    assert failed.is_error
    assert {s.origin for s in mcp.tools()} == set()  # stopped: nothing offered
    (refused,) = [e for e in logs if e["event"] == "mcp server unavailable"]
    assert refused["server"] == "wrongkey" and refused["reason"].startswith("HTTP 401")
    assert SECRET not in repr(logs)


async def test_a_streamable_http_server_that_goes_away_is_reconnected_when_it_is_back(
    teammates: Path, stopper: list[TeammateMcp]
) -> None:
    async with http_echo(SECRET) as url:
        write_config(
            teammates / "dana" / "mcp.json",
            {"remote": {"url": url, "headers": {"Authorization": f"Bearer {SECRET}"}}},
        )
        mcp = teammate_mcp(teammates)
        stopper.append(mcp)
        await mcp.start()
        assert (await mcp.call("remote_echo", {"text": "one"})).text == "echo: one"

    with structlog.testing.capture_logs() as logs:
        await until(lambda: not mcp.tools(), what="the gone server's tools withdrawn")
        gone = await mcp.call("remote_echo", {"text": "two"})
        async with http_echo(SECRET, port=int(url.rsplit(":", 1)[1].split("/")[0])):
            await until(lambda: mcp.connected("remote"), what="reconnected")
            back = await mcp.call("remote_echo", {"text": "three"})

    assert gone.is_error
    assert back.text == "echo: three"
    events = [e["event"] for e in logs if e.get("server") == "remote"]
    assert "mcp server started" in events
