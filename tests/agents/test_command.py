"""The ``command`` back end with real subprocesses: the stdin/env/stdout contract of docs/agents.md."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from nanoslack.agents import CommandAgent, TurnFailed, render_prompt
from nanoslack.agents.local import LocalTools
from nanoslack.routines.gate import run_gate

from .helpers import bot, human, make_turn

PY = shlex.quote(sys.executable)


def script(tmp_path: Path, body: str, name: str = "agent.py") -> str:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return f"{PY} {shlex.quote(str(path))}"


async def test_stdin_carries_the_turn_prompt(tmp_path: Path) -> None:
    out = tmp_path / "stdin.txt"
    cmd = script(tmp_path, f"import sys; open({str(out)!r}, 'w').write(sys.stdin.read())")
    turn = make_turn(human("@dana plan it"), bot("on it", "eli"), wrapping_up=True)

    await CommandAgent(cmd, instance="dana").run(turn, LocalTools())

    assert out.read_text() == render_prompt(turn)


async def test_the_five_env_vars_and_the_system_prompt_file_are_set(tmp_path: Path) -> None:
    out = tmp_path / "env.json"
    cmd = script(
        tmp_path,
        "import json, os\n"
        "keys = ['NANOSLACK_INSTANCE', 'NANOSLACK_CHANNEL', 'NANOSLACK_THREAD_TS', 'NANOSLACK_SENDER',\n"
        "        'NANOSLACK_WRAPPING_UP', 'NANOSLACK_NAME', 'PATH']\n"
        "env = {k: os.environ.get(k) for k in keys}\n"
        "env['system'] = open(os.environ['NANOSLACK_SYSTEM_PROMPT_FILE']).read()\n"
        f"json.dump(env, open({str(out)!r}, 'w'))\n",
    )
    turn = make_turn(
        bot("@dana your turn", "eli"),
        channel="G0ROOM",
        thread_ts="1700000000.000100",
        wrapping_up=True,
        system="You are Dana.",
    )

    await CommandAgent(cmd, instance="dana").run(turn, LocalTools())

    env = json.loads(out.read_text())
    assert env["NANOSLACK_INSTANCE"] == "dana"
    assert env["NANOSLACK_CHANNEL"] == "G0ROOM"
    assert env["NANOSLACK_THREAD_TS"] == "1700000000.000100"
    assert env["NANOSLACK_SENDER"] == "slack:bot:B0ELI"
    assert env["NANOSLACK_WRAPPING_UP"] == "1"
    assert env["NANOSLACK_NAME"] == "dana"
    assert env["system"] == "You are Dana."
    assert env["PATH"] == os.environ["PATH"]  # the fleet's environment is inherited


async def test_dm_turn_has_empty_thread_ts_and_wrapping_up_zero(tmp_path: Path) -> None:
    cmd = 'printf "%s|%s" "$NANOSLACK_THREAD_TS" "$NANOSLACK_WRAPPING_UP"'

    reply = await CommandAgent(cmd, instance="dana").run(make_turn(room="DM", thread_ts=""), LocalTools())

    assert reply.posts == ("|0",)


async def test_separator_lines_split_stdout_into_posts(tmp_path: Path) -> None:
    cmd = script(
        tmp_path,
        "print('First post,\\nover two lines.  ')\nprint('---')\nprint('  second  ')\n"
        "print('---')\nprint('   ')\nprint('--- ')\nprint('third -- not a separator ---')\n",
    )

    reply = await CommandAgent(cmd, instance="dana").run(make_turn(), LocalTools())

    assert reply.posts == ("First post,\nover two lines.", "second", "third -- not a separator ---")


@pytest.mark.parametrize("cmd", ["true", "printf '\\n  \\n'", "echo ---"])
async def test_empty_output_is_silence(cmd: str) -> None:
    reply = await CommandAgent(cmd, instance="dana").run(make_turn(), LocalTools())

    assert reply.posts == ()
    assert reply.tokens == 0


async def test_non_zero_exit_is_a_failed_turn_with_code_and_scrubbed_stderr_tail() -> None:
    noise = "x" * 500
    cmd = f"echo 'partial reply'; echo '{noise} token xoxb-123-secret and sk-abcdef123456 boom' >&2; exit 3"

    with pytest.raises(TurnFailed) as failed:
        await CommandAgent(cmd, instance="dana").run(make_turn(), LocalTools())

    message = str(failed.value)
    assert message.startswith("agent command exited with 3: ")
    assert message.endswith("boom")
    assert "xoxb-123-secret" not in message and "sk-abcdef123456" not in message
    assert len(message) < 260  # the last 200 characters of stderr, not all of it


async def test_timeout_is_a_failed_turn_and_kills_the_whole_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    # The shell starts a grandchild that would outlive a plain kill of the shell.
    cmd = f"sleep 60 & echo $! > {shlex.quote(str(pid_file))}; wait"
    agent = CommandAgent(cmd, timeout=1.0, instance="dana")

    with pytest.raises(TurnFailed, match="timed out after 1 s"):
        await agent.run(make_turn(), LocalTools())

    grandchild = int(pid_file.read_text())
    await wait_until(lambda: not alive(grandchild), deadline_s=5.0)

    reply = await CommandAgent("echo still serving", instance="dana").run(make_turn(), LocalTools())
    assert reply.posts == ("still serving",)


async def test_cancelled_turn_kills_the_command(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    cmd = f"sleep 60 & echo $! > {shlex.quote(str(pid_file))}; wait"
    task = asyncio.create_task(CommandAgent(cmd, instance="dana").run(make_turn(), LocalTools()))
    # Generous deadlines: a shell and its child start slowly on a loaded 2-core runner,
    # and the test waits only as long as the condition takes.
    await wait_until(lambda: pid_file.exists() and pid_file.read_text().strip() != "", deadline_s=20.0)

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    await wait_until(lambda: not alive(int(pid_file.read_text())), deadline_s=20.0)


async def test_a_turn_cancelled_as_its_command_starts_kills_what_it_started(tmp_path: Path) -> None:
    # Under load the shell can start its own children before the event loop has heard that
    # it started: a cancel then must kill the whole group, not the shell alone.
    pid_file = tmp_path / "child.pid"
    cmd = f"sleep 60 & echo $! > {shlex.quote(str(pid_file))}; wait"
    await cancel_as_it_starts(CommandAgent(cmd, instance="dana").run(make_turn(), LocalTools()), pid_file)


async def test_a_routine_gate_cancelled_as_it_starts_kills_what_it_started(tmp_path: Path) -> None:
    # The gate's process group is killed whole on a cancel, as the agent's is (docs/routines.md).
    pid_file = tmp_path / "child.pid"
    cmd = f"sleep 60 & echo $! > {shlex.quote(str(pid_file))}; wait"
    await cancel_as_it_starts(run_gate(cmd, tmp_path, instance="dana", routine="standup"), pid_file)


async def cancel_as_it_starts(run: Coroutine[Any, Any, object], pid_file: Path) -> None:
    """Cancel ``run`` once the shell it starts has started a child (its pid in ``pid_file``)
    but before the event loop heard that the shell started; the child must die."""
    before = children()
    task = asyncio.create_task(run)
    deadline = time.monotonic() + 20.0
    # One loop iteration at a time, so the turn takes no step past the spawn unseen.
    while not children() - before:
        assert time.monotonic() < deadline, "the command did not start"
        await asyncio.sleep(0)
    # The loop stands still, as on a loaded runner, while the shell starts its child.
    block_until(lambda: pid_file.exists() and pid_file.read_text().strip() != "", deadline_s=20.0)

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    await wait_until(lambda: not alive(int(pid_file.read_text())), deadline_s=20.0)


async def test_a_command_that_ignores_stdin_still_answers() -> None:
    reply = await CommandAgent("echo hi", instance="dana").run(make_turn(human("x" * 200_000)), LocalTools())

    assert reply.posts == ("hi",)


def alive(pid: int) -> bool:
    """Running, not merely a zombie waiting for a reaper we do not control."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


async def wait_until(predicate: Callable[[], bool], deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met before the deadline")
        await asyncio.sleep(0.05)


def children() -> set[int]:
    """This process's running children (read from /proc: no library lists them)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and alive(int(entry)):
            found.add(int(entry))
    return found


def block_until(predicate: Callable[[], bool], deadline_s: float) -> None:
    """Wait without yielding to the event loop: it stands still meanwhile."""
    deadline = time.monotonic() + deadline_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met before the deadline")
        time.sleep(0.01)
