"""``command`` back end: any program, through the shell (docs/agents.md).

Contract with the program:

- **stdin**: the thread from its first message (``render_thread``: the agent's earlier
  turns there, each prompt then what it posted, bounded like the LLMs' history), a line
  ``--- new since your last turn ---``, then the turn prompt (``render_prompt``); only the
  prompt on a thread's first turn. UTF-8, then EOF.
- **environment**: the fleet's own environment (the child inherits it like any
  shell command, API keys included: the command is the operator's own code), plus
  ``NANOSLACK_INSTANCE``, ``NANOSLACK_CHANNEL``, ``NANOSLACK_THREAD_TS`` (empty in a
  DM), ``NANOSLACK_SENDER`` (``slack:U…`` or ``slack:bot:B…``),
  ``NANOSLACK_WRAPPING_UP`` (``1``/``0``), ``NANOSLACK_SESSION`` (a UUID, the same on
  every turn of one (instance, conversation, thread): a CLI agent resumes its own
  session there, docs/memory.md), and two additions:
  ``NANOSLACK_NAME`` (the display name the prompt addresses),
  ``NANOSLACK_FILES`` (JSON: a list of ``{"name", "path", "mimetype"}``, the files of the
  messages the turn answers, saved in the turn's folder and removed with it; ``[]`` when
  none: docs/agents.md "Files") and
  ``NANOSLACK_SYSTEM_PROMPT_FILE`` (path of a file holding the teammate's system
  prompt, persona first, then its notes; removed after the turn, and by the next start when a
  SIGKILL left it behind: ``sweep_turn_folders``). The system prompt is not on stdin
  so that a program that only wants the conversation can read stdin as is, and it
  is a file, not a variable, because a long persona can exceed the kernel's limit on
  one environment string.
  With the fleet's MCP endpoint (``nanoslack.tools.serve``, docs/agents.md) also
  ``NANOSLACK_MCP_URL`` and ``NANOSLACK_MCP_TOKEN``: the turn's host tools
  (``send_message``, ``read_skill``, ``send_to_agent``, ``message_owner``, ``react``,
  ``send_file``) over
  streamable HTTP, for a client presenting ``Authorization: Bearer <token>``, valid
  until the turn ends (127.0.0.1 is added to ``NO_PROXY``/``no_proxy``, so a
  proxy in the environment is not asked for it). What the program posts through
  ``send_message`` comes before its stdout's posts. Without an endpoint (a back end
  run alone) neither is set, even when the fleet's own environment has them.
- **stdout**: the reply. A line ``---`` separates posts; each post is stripped and
  empty ones are dropped; no output is silence. In a DM the first post streams into
  Slack line by line as it is printed (docs/agent-surface.md).
- **exit status**: non-zero is a failed turn (nothing posted): the error carries the
  exit code and the last 200 characters of stderr, tokens scrubbed.
- **timeout** (default 120 s): the whole process group is killed (the shell *and*
  whatever it started) and the turn fails. A cancelled turn kills it the same way.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import socket
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from pathlib import Path
from typing import Protocol

from nanoslack.agents import drafts
from nanoslack.agents.prompt import opening, render_thread
from nanoslack.agents.redact import tail
from nanoslack.agents.types import Reply, Tools, Turn, TurnFailed
from nanoslack.config.agent import DEFAULT_TIMEOUT_S
from nanoslack.logs import get_logger

log = get_logger("nanoslack.agents")

SEPARATOR = "---"
STDERR_TAIL = 200
# Read from a command's stdout at a time, while its first post is followed.
STDOUT_READ = 65_536
TURN_FOLDER_PREFIX = "nanoslack-turn-"
# nanoslack-turn-<host>.<pid>-<tempfile's random part>: whose folder it is.
_TURN_FOLDER_RE = re.compile(r"^nanoslack-turn-(?P<host>.+)\.(?P<pid>\d+)-[^.-]+$")


MCP_URL_ENV = "NANOSLACK_MCP_URL"
MCP_TOKEN_ENV = "NANOSLACK_MCP_TOKEN"
FILES_ENV = "NANOSLACK_FILES"


class McpEndpoint(Protocol):
    """Where one turn's host tools are served, and the token that opens them."""

    @property
    def url(self) -> str: ...

    @property
    def token(self) -> str: ...


class McpEndpoints(Protocol):
    """Serves a turn's tools over MCP while the block runs (``nanoslack.tools.HostToolServer``)."""

    def grant(self, tools: Tools, *, instance: str) -> AbstractAsyncContextManager[McpEndpoint]: ...


def save_files(turn: Turn, folder: Path) -> list[dict[str, str]]:
    """The turn's files that were downloaded, copied into ``folder`` under their own names
    (made safe and unique): what ``NANOSLACK_FILES`` lists."""
    listed: list[dict[str, str]] = []
    used: set[str] = set()
    for file in turn.files:
        if not file.path:
            continue
        name = _safe_name(file.name or file.id, used)
        folder.mkdir(exist_ok=True)
        target = folder / name
        try:
            shutil.copyfile(file.path, target)
        except OSError as exc:
            log.warning("file not shown", instance=turn.instance, file=file.id, reason=exc.strerror)
            continue
        listed.append({"name": file.name, "path": str(target), "mimetype": file.mimetype})
    return listed


def _safe_name(name: str, used: set[str]) -> str:
    base = re.sub(r"[^\w.\- ]", "_", Path(name).name).strip(" .") or "file"
    candidate, n = base, 1
    while candidate in used:
        n += 1
        stem, dot, ext = base.rpartition(".")
        candidate = f"{stem}-{n}.{ext}" if dot and stem else f"{base}-{n}"
    used.add(candidate)
    return candidate


def turn_env(turn: Turn, system_prompt_file: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    # Only this turn's endpoint may show up here: never one inherited from the fleet's
    # own environment (a fleet run under another one's command agent).
    env.pop(MCP_URL_ENV, None)
    env.pop(MCP_TOKEN_ENV, None)
    env.update(
        NANOSLACK_INSTANCE=turn.instance,
        NANOSLACK_CHANNEL=turn.channel,
        NANOSLACK_THREAD_TS=turn.thread_ts,
        NANOSLACK_SENDER=turn.sender_id,
        NANOSLACK_WRAPPING_UP="1" if turn.wrapping_up else "0",
        NANOSLACK_SESSION=turn.session,
        NANOSLACK_NAME=turn.name,
        NANOSLACK_SYSTEM_PROMPT_FILE=str(system_prompt_file),
        # The routine this turn is a run of (docs/routines.md); empty otherwise.
        NANOSLACK_ROUTINE=turn.origin.name if turn.origin is not None else "",
    )
    return env


def split_posts(stdout: str) -> tuple[str, ...]:
    posts: list[list[str]] = [[]]
    for line in stdout.splitlines():
        if line.rstrip() == SEPARATOR:
            posts.append([])
        else:
            posts[-1].append(line)
    texts = ("\n".join(lines).strip() for lines in posts)
    return tuple(text for text in texts if text)


class CommandAgent:
    name = "command"

    def __init__(
        self,
        command: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        instance: str,
        mcp: McpEndpoints | None = None,
    ) -> None:
        self.command = command
        self.timeout = timeout
        self.instance = instance
        self.mcp = mcp

    def __repr__(self) -> str:
        return f"<CommandAgent instance={self.instance} timeout={self.timeout}>"

    async def run(self, turn: Turn, tools: Tools) -> Reply:
        # The token outlives the process by nothing: it is revoked as this block ends,
        # before the turn's effects are recorded.
        async with self._mcp_env(tools) as mcp_env:
            with tempfile.TemporaryDirectory(prefix=_turn_folder_prefix()) as tmp:
                system_file = Path(tmp) / "system.md"
                system_file.write_text(opening(turn), encoding="utf-8")
                files = await asyncio.to_thread(save_files, turn, Path(tmp) / "files")
                env = (
                    turn_env(turn, system_file) | mcp_env | {FILES_ENV: json.dumps(files, ensure_ascii=False)}
                )
                token = mcp_env.get(MCP_TOKEN_ENV)
                stdout, stderr, code = await self._execute(render_thread(turn), env, _first_post(token))
        # A client that dumps its request must not put the token in a log or a post.
        if code != 0:
            reason = tail(stderr, STDERR_TAIL, secrets=(token,))
            log.warning("agent command failed", instance=self.instance, exit_code=code, stderr=reason)
            raise TurnFailed(f"agent command exited with {code}" + (f": {reason}" if reason else ""))
        posts = split_posts(stdout.replace(token, "***") if token else stdout)
        log.info("agent replied", instance=self.instance, backend=self.name, posts=len(posts))
        return Reply(posts)

    @asynccontextmanager
    async def _mcp_env(self, tools: Tools) -> AsyncIterator[dict[str, str]]:
        if self.mcp is None:
            yield {}
            return
        async with self.mcp.grant(tools, instance=self.instance) as endpoint:
            yield {MCP_URL_ENV: endpoint.url, MCP_TOKEN_ENV: endpoint.token, **_no_proxy_for_loopback()}

    async def _execute(
        self, stdin: str, env: dict[str, str], follow: Callable[[str], None] | None = None
    ) -> tuple[str, str, int]:
        proc = await spawn_in_group(self.command, env)
        try:
            data = stdin.encode("utf-8")
            out, err = await asyncio.wait_for(_communicate(proc, data, follow), self.timeout)
        except TimeoutError:
            await kill_group(proc)
            log.warning("agent command timed out", instance=self.instance, timeout_s=self.timeout)
            raise TurnFailed(f"agent command timed out after {self.timeout:g} s") from None
        except BaseException:
            await kill_group(proc)  # cancelled turn (halt, shutdown): leave nothing behind
            raise
        code = proc.returncode if proc.returncode is not None else -1
        return out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), code


async def spawn_in_group(
    command: str,
    env: Mapping[str, str],
    *,
    cwd: Path | None = None,
    stdin: int = asyncio.subprocess.PIPE,
    stderr: int = asyncio.subprocess.PIPE,
) -> asyncio.subprocess.Process:
    """``command`` through the shell, stdout piped, in a process group of its own that
    ``kill_group`` kills whole; cancelled while it starts, the group is killed too."""
    spawning = asyncio.ensure_future(
        asyncio.create_subprocess_shell(
            command,
            cwd=cwd,
            stdin=stdin,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env=dict(env),
            # Own process group: on timeout we kill the shell's children too, which
            # would otherwise keep running and hold the stdout pipe open.
            start_new_session=True,
        )
    )
    try:
        return await asyncio.shield(spawning)
    except asyncio.CancelledError:
        # Cancelled while the shell starts (a loaded host runs it before the loop hears it
        # started): the event loop's own clean-up kills the shell alone, and whatever it has
        # started already lives on. Let the start finish, then kill the group; the callback
        # does it even if a second cancel ends this wait.
        spawning.add_done_callback(_kill_spawned_group)
        with suppress(asyncio.CancelledError, Exception):
            await kill_group(await asyncio.shield(spawning))
        raise


def _kill_spawned_group(spawning: asyncio.Future[asyncio.subprocess.Process]) -> None:
    if spawning.cancelled() or spawning.exception() is not None:
        return
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(spawning.result().pid, signal.SIGKILL)


def _first_post(token: str | None) -> Callable[[str], None] | None:
    """Where the stdout so far goes while the command runs: its first post, to the turn's
    draft (a DM's streamed reply, docs/agent-surface.md); None when nothing follows it."""
    draft = drafts.current()
    if draft is None:
        return None

    def follow(stdout: str) -> None:
        posts = split_posts(stdout.replace(token, "***") if token else stdout)
        if posts:
            draft(posts[0])

    return follow


async def _communicate(
    proc: asyncio.subprocess.Process, data: bytes, follow: Callable[[str], None] | None
) -> tuple[bytes, bytes]:
    """``proc.communicate``, telling ``follow`` (if any) the stdout so far after every whole
    line. A command may exit or close its stdin before reading it all: the rest is dropped
    (asyncio's pipe raises ``BrokenPipeError`` then, uvloop's ``RuntimeError``)."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stdin, stdout, stderr = proc.stdin, proc.stdout, proc.stderr

    async def feed() -> None:
        with suppress(BrokenPipeError, ConnectionResetError, RuntimeError):
            stdin.write(data)
            await stdin.drain()
        stdin.close()

    async def lines() -> bytes:
        out = bytearray()
        while chunk := await stdout.read(STDOUT_READ):
            out += chunk
            if follow is not None and b"\n" in chunk:
                follow(out[: out.rfind(b"\n")].decode("utf-8", "replace"))
        return bytes(out)

    _, out, err = await asyncio.gather(feed(), lines(), stderr.read())
    await proc.wait()
    return out, err


def _no_proxy_for_loopback() -> dict[str, str]:
    """A CLI behind ``HTTPS_PROXY`` would send its MCP calls for 127.0.0.1 to the proxy
    (which cannot reach it) unless ``NO_PROXY`` names the loopback address."""
    env: dict[str, str] = {}
    for key in ("NO_PROXY", "no_proxy"):
        hosts = [h.strip() for h in os.environ.get(key, "").split(",") if h.strip()]
        if "127.0.0.1" not in hosts:
            env[key] = ",".join([*hosts, "127.0.0.1"])
    return env


async def kill_group(proc: asyncio.subprocess.Process) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with suppress(ProcessLookupError):
        proc.kill()
    with suppress(asyncio.CancelledError, Exception):
        await asyncio.wait_for(proc.wait(), 5.0)


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())


def _turn_folder_prefix() -> str:
    # Named after this process so a later start can tell a live turn's folder from
    # one a SIGKILL left behind (the persona in it would otherwise stay for good).
    return f"{TURN_FOLDER_PREFIX}{_host()}.{os.getpid()}-"


def sweep_turn_folders(root: Path | None = None) -> int:
    """At start: remove the turn folders of processes of this host that no longer exist.

    Another fleet on this host (a standby, a second ``.env``) keeps its folders: only a
    dead pid's go, and this process's own pid is left alone (several fleets in one
    process, as in the tests). Folders of other users are not ours to remove.
    """
    root = Path(tempfile.gettempdir()) if root is None else root
    removed = 0
    for folder in root.glob(TURN_FOLDER_PREFIX + "*"):
        match = _TURN_FOLDER_RE.match(folder.name)
        if match is None or match["host"] != _host() or not _dead(int(match["pid"])):
            continue
        try:
            if folder.is_symlink() or not folder.is_dir() or folder.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed += 1
    if removed:
        log.info("stale turn folders removed", folder=str(root), count=removed)
    return removed


def _dead(pid: int) -> bool:
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False
