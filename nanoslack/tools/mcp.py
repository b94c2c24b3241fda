"""A teammate's MCP servers (docs/agents.md): read from its config, kept connected, called.

Configuration: ``teammates/_mcp.json`` (every instance) and ``teammates/<name>/mcp.json``
(that instance; a server of the same name there replaces the shared one whole)::

    {"mcpServers": {
      "notes":  {"command": "python", "args": ["notes_server.py"],
                 "env": {"NOTES_TOKEN": "${NOTES_TOKEN}"}, "cwd": "."},
      "github": {"url": "https://mcp.example.com/mcp",
                 "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"},
                 "approval": "owner",
                 "tools": {"search_issues": {"approval": "none"}}}
    }}

- A server has either ``command`` (stdio: ``args``, ``env`` and ``cwd`` optional; ``cwd``
  is relative to the file's folder, the default) or ``url`` (streamable HTTP; ``headers``
  optional). Its name is letters, digits, ``-`` and ``_``.
- ``${VAR}`` in an ``env`` or ``headers`` value is read from the fleet's settings (the
  environment and ``.env``), so secrets stay out of the file; a variable that is not set
  keeps that server from starting (the log line names the server and the variable).
  The values read that way are masked (``***``) in anything logged or given back.
- ``"approval": "owner"`` on a server: every call of its tools waits for an owner's
  Allow; under ``"tools"``, ``{"<tool>": {"approval": "owner" | "none"}}`` says it for one
  tool (the server's own name for it) and wins over the server's.
- A stdio server gets only a safe base environment (``PATH``, ``HOME``, …) plus its
  ``env``: the fleet's tokens are not inherited.

The model sees each tool as ``<server>_<tool>`` (origin ``mcp:<server>``), with the
description and input schema the server gives. Servers start with the fleet
(``start``), stay connected (a probe while idle notices one that died) and are
restarted with backoff; meanwhile their tools are absent. A server that cannot start
logs ``mcp server unavailable``. Each call is bounded by ``NANOSLACK_TOOL_TIMEOUT``. A
server's stderr goes to a scratch file, never to the fleet's log; its last line,
masked, is given with ``mcp server unavailable`` to say why.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import re
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx2
import mcp_types
from mcp import Client, MCPError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from nanoslack.agents import ToolResult
from nanoslack.agents.redact import scrub
from nanoslack.agents.tool import AnyArguments, Tool, dumped, find
from nanoslack.config import ToolSettings
from nanoslack.logs import get_logger
from nanoslack.shutdown import cancel

log = get_logger(__name__)

SHARED_FILE = "_mcp.json"
INSTANCE_FILE = "mcp.json"
_SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,40}")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_TOOL_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")
# Model APIs take tool names of at most 64 characters.
MAX_TOOL_NAME = 64
_APPROVALS = {"owner": True, "none": False}
_SERVER_KEYS = frozenset({"command", "args", "env", "cwd", "url", "headers", "approval", "tools"})
_MAX_TOOL_PAGES = 20
# A scratch stderr file past this size is emptied: only its last line is ever read.
_MAX_STDERR_BYTES = 256 * 1024

Lookup = Callable[[str], str | None]


class McpConfigError(ValueError):
    """An MCP configuration problem; the message names the file (and server) and says what."""

    def __init__(self, message: str, *, server: str | None = None) -> None:
        super().__init__(message)
        self.server = server


@dataclass(frozen=True)
class ServerConfig:
    """One MCP server as configured, its ``${VAR}`` already read."""

    name: str
    source: Path  # the file it came from
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    approval: bool = False  # "approval": "owner" on the server
    tool_approval: Mapping[str, bool] = field(default_factory=dict)  # per tool, wins
    # The values ``${VAR}`` stood for: masked wherever this server's text is shown.
    secrets: tuple[str, ...] = ()

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"

    def needs_approval(self, tool: str) -> bool:
        return self.tool_approval.get(tool, self.approval)


@dataclass(frozen=True)
class McpConfig:
    """An instance's servers, and what kept others out (a malformed file, a missing variable)."""

    servers: tuple[ServerConfig, ...] = ()
    errors: tuple[McpConfigError, ...] = ()


def load_mcp_config(teammates_dir: Path, instance: str, lookup: Lookup) -> McpConfig:
    """``_mcp.json`` then ``<instance>/mcp.json`` (its servers win on a name clash).
    A file that is absent has no servers; a malformed one is an error and none of its
    servers are used; a server whose variable is not set is an error of its own."""
    servers: dict[str, ServerConfig] = {}
    errors: list[McpConfigError] = []
    for path in (teammates_dir / SHARED_FILE, teammates_dir / instance / INSTANCE_FILE):
        try:
            found, missing = parse_mcp_file(path, lookup)
        except McpConfigError as exc:
            errors.append(exc)
            continue
        for name in missing:
            servers.pop(name, None)  # the instance's server meant to replace it: not the shared one
        servers.update(found)
        errors.extend(missing.values())
    return McpConfig(tuple(servers.values()), tuple(errors))


def parse_mcp_file(path: Path, lookup: Lookup) -> tuple[dict[str, ServerConfig], dict[str, McpConfigError]]:
    """The servers of one file, and those left out for a variable that is not set.
    Raises ``McpConfigError`` (naming the file) when the file itself is malformed."""
    if not path.is_file():
        return {}, {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise McpConfigError(f"{path}: cannot be read ({type(exc).__name__})") from None
    except json.JSONDecodeError as exc:
        raise McpConfigError(
            f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("mcpServers"), dict):
        raise McpConfigError(f'{path}: expected an object {{"mcpServers": {{"<server>": {{…}}}}}}')
    found: dict[str, ServerConfig] = {}
    missing: dict[str, McpConfigError] = {}
    for name, entry in data["mcpServers"].items():
        try:
            found[name] = _server(path, name, entry, lookup)
        except _MissingVariable as exc:
            missing[name] = McpConfigError(
                f"{path}: server {name!r}: ${{{exc.variable}}} ({exc.where}) is not set", server=name
            )
    return found, missing


class _MissingVariable(Exception):
    def __init__(self, variable: str, where: str) -> None:
        super().__init__(variable)
        self.variable = variable
        self.where = where


def _server(path: Path, name: str, entry: Any, lookup: Lookup) -> ServerConfig:
    def bad(what: str) -> McpConfigError:
        return McpConfigError(f"{path}: server {name!r}: {what}", server=name)

    if not _SERVER_NAME.fullmatch(name):
        raise bad("a server name is 1 to 40 letters, digits, '-' or '_'")
    if not isinstance(entry, dict):
        raise bad("expected an object with a command or a url")
    unknown = sorted(set(entry) - _SERVER_KEYS)
    if unknown:
        raise bad(f"unknown key {unknown[0]!r} (known: {', '.join(sorted(_SERVER_KEYS))})")
    command, url = entry.get("command"), entry.get("url")
    if (command is None) == (url is None):
        raise bad('give either "command" (stdio) or "url" (streamable HTTP)')
    secrets: list[str] = []
    approval, tool_approval = _approvals(entry, bad)
    if command is not None:
        if not isinstance(command, str) or not command.strip():
            raise bad('"command" must be a non-empty string')
        for key in ("url", "headers"):
            if key in entry:
                raise bad(f'"{key}" is for a url server, not a command')
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise bad('"args" must be a list of strings')
        cwd = entry.get("cwd", ".")
        if not isinstance(cwd, str):
            raise bad('"cwd" must be a string')
        return ServerConfig(
            name,
            path,
            command=command,
            args=tuple(args),
            env=_expand(_strings(entry, "env", bad), "env", lookup, secrets),
            cwd=(path.parent / cwd).resolve(),
            approval=approval,
            tool_approval=tool_approval,
            secrets=tuple(secrets),
        )
    if not isinstance(url, str) or not re.match(r"https?://", url):
        raise bad('"url" must be an http:// or https:// address')
    for key in ("args", "env", "cwd"):
        if key in entry:
            raise bad(f'"{key}" is for a command server, not a url')
    return ServerConfig(
        name,
        path,
        url=url,
        headers=_expand(_strings(entry, "headers", bad), "headers", lookup, secrets),
        approval=approval,
        tool_approval=tool_approval,
        secrets=tuple(secrets),
    )


def _strings(entry: Mapping[str, Any], key: str, bad: Callable[[str], McpConfigError]) -> dict[str, str]:
    value = entry.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise bad(f'"{key}" must be an object of strings')
    return value


def _approvals(
    entry: Mapping[str, Any], bad: Callable[[str], McpConfigError]
) -> tuple[bool, dict[str, bool]]:
    def approval(value: Any, where: str) -> bool:
        if value not in _APPROVALS:
            raise bad(f'{where}"approval" must be "owner" or "none"')
        return _APPROVALS[value]

    server = approval(entry.get("approval", "none"), "")
    tools = entry.get("tools", {})
    if not isinstance(tools, dict):
        raise bad('"tools" must be an object: {"<tool>": {"approval": "owner"}}')
    by_tool: dict[str, bool] = {}
    for tool, options in tools.items():
        if not isinstance(options, dict) or set(options) - {"approval"}:
            raise bad(f'"tools"."{tool}" must be {{"approval": "owner" | "none"}}')
        if "approval" in options:
            by_tool[tool] = approval(options["approval"], f'"tools"."{tool}": ')
    return server, by_tool


def _expand(values: Mapping[str, str], where: str, lookup: Lookup, secrets: list[str]) -> dict[str, str]:
    out = {}
    for key, value in values.items():

        def read(match: re.Match[str], key: str = key) -> str:
            found = lookup(match.group(1))
            if found is None:
                raise _MissingVariable(match.group(1), f"{where}.{key}")
            secrets.append(found)
            return found

        out[key] = _VAR.sub(read, value)
    return out


# -- the servers, kept connected -------------------------------------------------------


@dataclass(frozen=True)
class Lifecycle:
    """How the servers are kept: seconds, all of them."""

    start_timeout: float = 30.0  # to connect and list the tools
    start_wait: float = 15.0  # ``start`` waits this long at most for the first attempts
    probe_interval: float = 10.0  # an idle server is probed (its tools listed) this often
    probe_timeout: float = 10.0
    backoff_min: float = 1.0
    backoff_max: float = 60.0
    stable_after: float = 60.0  # up this long: the next restart starts from backoff_min


class _Server:
    """One server's connection and its supervisor (restarts with backoff)."""

    def __init__(self, config: ServerConfig, instance: str, lifecycle: Lifecycle, timeout: float) -> None:
        self.config = config
        self.instance = instance
        self.timeout = timeout
        self._lifecycle = lifecycle
        self.client: Client | None = None
        self.tools: dict[str, Tool[AnyArguments]] = {}
        self.in_flight = 0
        self.attempted = asyncio.Event()  # the first start attempt is over, either way
        self.connected = asyncio.Event()
        self._dead = asyncio.Event()
        self._dead_reason = ""
        self._stderr: IO[str] | None = None
        self._http_status: int | None = None
        self.task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.config.name

    def mask(self, text: str) -> str:
        return scrub(text, self.config.secrets)

    def died(self, reason: str) -> None:
        """A call found the connection gone: restart without waiting for the next probe."""
        self._dead_reason = reason
        self._dead.set()

    async def run(self) -> None:
        delay = self._lifecycle.backoff_min
        while True:
            up_since: float | None = None
            self._http_status = None
            try:
                async with self._connect() as client:
                    async with asyncio.timeout(self._lifecycle.start_timeout):
                        tools = await self._list_tools(client)
                    up_since = time.monotonic()
                    self._online(client, tools)
                    reason = await self._watch(client)
            except asyncio.CancelledError:
                self._close_stderr()
                raise
            except BaseException as exc:  # an ExceptionGroup from the transport's task group too
                if not isinstance(exc, Exception):
                    raise
                reason = self.mask(_reason(exc))
                if self._http_status is not None:
                    reason = f"HTTP {self._http_status}: {reason}"
            finally:
                self._offline()
            self.attempted.set()
            stable = up_since is not None and time.monotonic() - up_since >= self._lifecycle.stable_after
            if stable:
                delay = self._lifecycle.backoff_min
            event = "mcp server unavailable" if up_since is None else "mcp server died"
            log.warning(
                event,
                server=self.name,
                instance=self.instance,
                reason=reason,
                stderr=self._stderr_tail(),
                retry_in=delay,
            )
            self._close_stderr()
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._lifecycle.backoff_max)

    @contextlib.asynccontextmanager
    async def _connect(self) -> Any:
        config = self.config
        async with contextlib.AsyncExitStack() as stack:
            if config.command is not None:
                self._stderr = tempfile.TemporaryFile(mode="a+", encoding="utf-8", errors="replace")
                params = StdioServerParameters(
                    command=config.command, args=list(config.args), env=dict(config.env), cwd=config.cwd
                )
                transport = stdio_client(params, errlog=self._stderr)
            else:
                assert config.url is not None
                http = await stack.enter_async_context(
                    httpx2.AsyncClient(
                        headers=dict(config.headers),
                        timeout=httpx2.Timeout(30.0, read=300.0),
                        event_hooks={"response": [self._saw_response]},
                    )
                )
                transport = streamable_http_client(config.url, http_client=http)
            client = Client(
                transport,
                client_info=mcp_types.Implementation(name="nanoslack", version="1"),
                cache=None,
            )
            # asyncio.timeout, not wait_for: the transport's task group must be entered
            # (and left) by this task, not by a helper task wait_for would make.
            async with asyncio.timeout(self._lifecycle.start_timeout):
                await stack.enter_async_context(client)
            yield client

    async def _list_tools(self, client: Client) -> list[mcp_types.Tool]:
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        for _ in range(_MAX_TOOL_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    def _online(self, client: Client, tools: Sequence[mcp_types.Tool]) -> None:
        self._set_tools(tools)
        self.client = client
        self._dead.clear()
        self.connected.set()
        self.attempted.set()
        log.info(
            "mcp server started",
            server=self.name,
            instance=self.instance,
            transport=self.config.transport,
            tools=len(self.tools),
        )

    def _set_tools(self, tools: Sequence[mcp_types.Tool]) -> None:
        found: dict[str, Tool[AnyArguments]] = {}
        for tool in tools:
            name = _model_name(self.name, tool.name)
            if name in found:
                if name not in self.tools:  # said once, not at every probe
                    log.warning(
                        "mcp tool skipped",
                        server=self.name,
                        instance=self.instance,
                        tool=tool.name,
                        reason=f"{name} is taken by another of its tools",
                    )
                continue
            found[name] = Tool(
                name,
                tool.description or "",
                AnyArguments,
                functools.partial(self.call, name, tool.name),
                origin=f"mcp:{self.name}",
                parameters=tool.input_schema,
                approval=self.config.needs_approval(tool.name),
            )
        self.tools = found  # one assignment: a turn reading the tools sees the old or the new

    async def call(self, name: str, tool: str, arguments: AnyArguments) -> ToolResult:
        """Call the server's ``tool`` (the model's ``name`` for it), within ``timeout``."""
        client = self.client
        if client is None:
            return ToolResult(f"the {self.name} MCP server is not connected right now", is_error=True)
        self.in_flight += 1
        try:
            async with asyncio.timeout(self.timeout):
                result = await client.call_tool(tool, dumped(arguments))
        except TimeoutError:
            return ToolResult(
                f"the tool {name!r} did not answer within {self.timeout:g} s (NANOSLACK_TOOL_TIMEOUT)",
                is_error=True,
            )
        except MCPError as exc:
            if exc.code == mcp_types.CONNECTION_CLOSED:
                self.died("the connection closed during a call")
                return ToolResult(f"the {self.name} MCP server went away during the call", is_error=True)
            return ToolResult(self.mask(f"the {self.name} MCP server refused the call: {exc.message}"), True)
        except Exception as exc:  # a transport failure: the model hears it, the probe decides on a restart
            return ToolResult(self.mask(f"the call failed: {_reason(exc)}"), is_error=True)
        finally:
            self.in_flight -= 1
        return ToolResult(self.mask(_text(result)), is_error=result.is_error)

    def _offline(self) -> None:
        self.client = None
        self.tools = {}
        self.connected.clear()

    async def _watch(self, client: Client) -> str:
        """Until the server is gone: a call saw it go, or an idle probe went unanswered.
        The probe lists the tools (``ping`` is gone from the 2026 protocol), so a
        server's changed tools are picked up on the way."""
        while True:
            # asyncio.timeout, not wait_for: in 3.11 wait_for can swallow a stop's cancel
            # that lands as the wait ends, and this loop would then never stop.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._lifecycle.probe_interval):
                    await self._dead.wait()
                return self._dead_reason
            self._trim_stderr()
            if self.in_flight:
                continue  # a call is the better probe; a busy server may answer late
            try:
                async with asyncio.timeout(self._lifecycle.probe_timeout):
                    tools = await self._list_tools(client)
            except asyncio.CancelledError:
                raise
            except MCPError as exc:
                if exc.code == mcp_types.CONNECTION_CLOSED:
                    return "the connection closed"
                continue  # it answered: alive
            except Exception as exc:
                return self.mask(f"no answer: {_reason(exc)}")
            self._set_tools(tools)

    async def _saw_response(self, response: httpx2.Response) -> None:
        # The transport turns an HTTP error into a bare "error response": keep the status.
        if response.status_code >= 400:
            self._http_status = response.status_code

    def _stderr_tail(self) -> str | None:
        if self._stderr is None:
            return None
        try:
            self._stderr.seek(0)
            lines = [line.strip() for line in self._stderr.read().splitlines() if line.strip()]
        except (OSError, ValueError):
            return None
        return self.mask(lines[-1])[-300:] if lines else None

    def _trim_stderr(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            if self._stderr is not None and self._stderr.seek(0, 2) > _MAX_STDERR_BYTES:
                self._stderr.truncate(0)

    def _close_stderr(self) -> None:
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


def _model_name(server: str, tool: str) -> str:
    return _TOOL_NAME_CHARS.sub("_", f"{server}_{tool}")[:MAX_TOOL_NAME]


def _reason(exc: BaseException) -> str:
    """The first real failure under any exception groups, as one line."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, MCPError):
        return f"MCP error {exc.code}: {exc.message}"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class TeammateMcp:
    """One instance's MCP servers, as ``nanoslack.tools.McpTools``."""

    def __init__(
        self,
        instance: str,
        config: McpConfig,
        *,
        timeout: float,
        lifecycle: Lifecycle | None = None,
    ) -> None:
        self.instance = instance
        self.config = config
        self._lifecycle = lifecycle or Lifecycle()
        self._servers = {s.name: _Server(s, instance, self._lifecycle, timeout) for s in config.servers}

    @classmethod
    def for_instance(
        cls, teammates_dir: Path, instance: str, lookup: Lookup, settings: ToolSettings
    ) -> TeammateMcp:
        return cls(instance, load_mcp_config(teammates_dir, instance, lookup), timeout=settings.tool_timeout)

    @property
    def servers(self) -> tuple[str, ...]:
        return tuple(self._servers)

    def connected(self, server: str) -> bool:
        found = self._servers.get(server)
        return found is not None and found.connected.is_set()

    async def start(self) -> None:
        """Log what the configuration kept out; start every server, waiting a bounded
        while for their first attempts (a slow one comes up later on its own)."""
        for error in self.config.errors:
            if error.server is not None:
                log.warning(
                    "mcp server unavailable", server=error.server, instance=self.instance, reason=str(error)
                )
            else:
                log.error("mcp config invalid", instance=self.instance, error=str(error))
        for server in self._servers.values():
            if server.task is None:
                server.task = asyncio.create_task(server.run(), name=f"{self.instance}-mcp-{server.name}")
        waits = [asyncio.create_task(s.attempted.wait()) for s in self._servers.values()]
        if waits:
            _, pending = await asyncio.wait(waits, timeout=self._lifecycle.start_wait)
            for task in pending:
                task.cancel()

    async def stop(self) -> None:
        """Stop every server at once (a stdio server is given a moment to exit, then killed)."""
        tasks = [server.task for server in self._servers.values() if server.task is not None]
        for server in self._servers.values():
            server.task = None
        # Until each is done: one cancel can be swallowed by a wait_for (``shutdown.cancel``).
        await asyncio.gather(*(cancel(task) for task in tasks))

    # -- McpTools --------------------------------------------------------------------------

    def tools(self) -> list[Tool[AnyArguments]]:
        return [tool for server in self._servers.values() for tool in server.tools.values()]

    def needs_approval(self, name: str) -> bool:
        return any(tool.approval for tool in self.tools() if tool.name == name)

    async def call(self, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        """One tool by its model's name, outside a turn (no step, no approval: ``doctor``, tests)."""
        tool = find(self.tools(), name)
        if tool is None:
            return ToolResult(f"the tool {name!r} is not available right now", is_error=True)
        return await tool.call(arguments)


def _text(result: mcp_types.CallToolResult) -> str:
    """What the model reads: the text blocks; other blocks named; structured content as
    JSON when there is no text."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.EmbeddedResource):
            resource = block.resource
            text = getattr(resource, "text", None)
            parts.append(text if isinstance(text, str) else f"[resource {resource.uri}]")
        elif isinstance(block, mcp_types.ResourceLink):
            parts.append(f"[resource {block.uri}]")
        else:
            parts.append(f"[{block.type} content: {getattr(block, 'mime_type', '')}]".replace(": ]", "]"))
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    return "\n".join(parts)
