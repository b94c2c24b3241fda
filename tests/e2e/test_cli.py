"""The ``nanoslack`` command as operators run it: a real subprocess each time."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from nanoslack.emulator import Emulator
from nanoslack.fleetproc import FleetProcess, child_env
from nanoslack.logs import TOKEN_RE
from nanoslack.testing.fleet_env import write_fleet_env

ROOT = Path(__file__).resolve().parents[2]


def nanoslack(
    *args: str, cwd: Path, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nanoslack", *args],
        cwd=cwd,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        text=True,
        timeout=timeout,
        env=child_env(env),
    )


def test_help_lists_every_command_and_unknown_commands_exit_2(tmp_path: Path) -> None:
    done = nanoslack("--help", cwd=tmp_path)
    assert done.returncode == 0
    for command in ("run", "demo", "emulator", "open-room", "q", "rooms", "hops", "senders"):
        assert f"  {command}" in done.stdout
    assert nanoslack("frobnicate", cwd=tmp_path).returncode == 2


async def test_run_without_any_instance_explains_what_it_expected(tmp_path: Path) -> None:
    run = FleetProcess.start(cwd=tmp_path)
    assert await run.wait(60) == 1
    assert "no instance configured" in run.output
    assert "SLACK_BOT_TOKEN" in run.output


async def test_run_names_the_missing_token_key(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("SLACK_INSTANCES=gh-bot\nSLACK_BOT_TOKEN_GH_BOT=xoxb-emu-gh-1\n")
    run = FleetProcess.start(cwd=tmp_path)
    assert await run.wait(60) == 1
    out = run.output
    assert "instance skipped: credentials missing" in out
    assert "SLACK_APP_TOKEN_GH_BOT" in out
    assert "xoxb-emu-gh-1" not in out


def test_q_through_the_cli_matches_the_script(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (a, b)")
        conn.execute("INSERT INTO t VALUES (1, 'x')")
    done = nanoslack("q", str(db), "SELECT a, b FROM t", "--header", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["a|b", "1|x"]


def test_demo_plays_the_room_end_to_end_and_exits_cleanly(tmp_path: Path) -> None:
    done = nanoslack("demo", "--no-web", cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "hold: awaiting approval" in out
    assert "alice clicks Allow" in out
    # The script agents answer in the thread, each handing on to the next by @mention.
    assert "dana: On it, alice." in out and "@eli" in out
    assert "eli: First cut" in out and "fay: Reviewed" in out
    assert "dropped — hop limit reached" in out
    assert "dropped — room not in SLACK_A2A_ROOMS" in out
    assert "xoxb-" not in out and "xapp-" not in out
    assert (tmp_path / "data" / "demo" / "nanoslack.db").is_file()


def test_demo_without_web_posts_typed_lines_as_alice_and_prints_the_bots_replies(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "nanoslack", "demo", "--no-web"],
        cwd=tmp_path,
        env=child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdin is not None and proc.stdout is not None
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout or []], daemon=True).start()
    seen: list[str] = []

    def wait_for(text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in seen):
            left = deadline - time.monotonic()
            assert left > 0 and proc.poll() is None, f"no {text!r} in: {''.join(seen)}"
            with contextlib.suppress(queue.Empty):
                seen.append(lines.get(timeout=min(left, 0.5)))

    try:
        wait_for("type a message to post it in the room as alice", timeout=120)
        start = len(seen)
        proc.stdin.write("@fay can you review the plan?\n")
        proc.stdin.flush()
        wait_for("alice: @fay can you review the plan?")
        wait_for("fay: Reviewed, alice")
        # fay hands on to dana by @mention; dana answers the bot.
        wait_for("dana: Thanks fay.")
        assert any("fay: from alice → allow" in line for line in seen[start:])
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_demo_without_web_answers_with_the_llm_back_end_of_dot_env(tmp_path: Path) -> None:
    from nanoslack.testing.llm_server import LLMServer, Request, openai_answer, openai_text, send

    def model(request: Request) -> Any:
        # One step posts, the next (the tool's result sent back) ends the turn.
        return openai_text() if request.tool_results() else openai_answer(send("The model here: hello alice"))

    async with LLMServer() as llm:
        llm.openai.default = model
        (tmp_path / ".env").write_text(
            "NANOSLACK_AGENT=openai\nNANOSLACK_MODEL=test-model\n"
            f"OPENAI_BASE_URL={llm.openai_url}\nOPENAI_API_KEY=sk-test-key-123456\n"
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "nanoslack", "demo", "--no-web",
            cwd=tmp_path, env=child_env(), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(b"@dana hi there\n"), timeout=120)
    text = out.decode()
    assert proc.returncode == 0, err.decode()
    assert "agents: openai back end from ./.env" in text
    assert "dana: The model here: hello alice" in text
    assert "hold: awaiting approval" not in text  # the scripted tour was skipped
    assert any(r.json and r.json.get("model") == "test-model" for r in llm.openai.requests)
    assert "sk-test-key-123456" not in text + err.decode()


async def test_run_refuses_an_instance_without_an_agent_back_end_and_names_the_key(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(
        "SLACK_INSTANCES=gh-bot\nSLACK_BOT_TOKEN_GH_BOT=xoxb-emu-gh-1\nSLACK_APP_TOKEN_GH_BOT=xapp-emu-gh-1\n"
        "SLACK_API_URL=http://127.0.0.1:9/api/\n"
    )
    run = FleetProcess.start(cwd=tmp_path)
    assert await run.wait(60) == 1
    out = run.output
    assert "instance skipped: agent not configured" in out
    assert "NANOSLACK_AGENT_GH_BOT" in out
    assert "xoxb-emu-gh-1" not in out and "xapp-emu-gh-1" not in out


async def test_run_at_debug_level_never_prints_a_token(emu: Emulator, tmp_path: Path) -> None:
    """The real command at LOG_LEVEL=debug: one instance refused by ``auth.test``, the
    other receiving a message with tokens pasted in (bolt logs every frame at debug)."""
    alice = emu.add_user("alice")
    dana, eli = emu.add_app("dana"), emu.add_app("eli")
    room = emu.create_conversation([alice.id, dana.bot_user_id, eli.bot_user_id])
    emu.fail_next("auth.test", 1, error="invalid_auth", app_id=eli.app_id)
    env_file = write_fleet_env(
        tmp_path / ".env",
        emu,
        [dana, eli],
        tmp_path / "data" / "nanoslack.db",
        SLACK_A2A_ROOMS=room.id,
        LOG_LEVEL="debug",
    )
    fleet = FleetProcess.start(env_file)
    try:
        await emu.wait_for(lambda: emu.connections(dana.app_id) >= 1, timeout=30)
        text = f"<@{dana.bot_user_id}> whose are these? {dana.bot_token} {dana.app_token} {eli.bot_token}"
        ts = await emu.post_as_user(alice.id, room.id, text)
        await fleet.wait_for_output(f"ts={ts}")
    finally:
        code = await fleet.stop()
    assert code == 0
    out = fleet.output
    assert "instance skipped: auth.test failed" in out
    for token in (dana.bot_token, dana.app_token, eli.bot_token, eli.app_token):
        assert token not in out
    assert "xoxb-***" in out and "xapp-***" in out  # the pasted tokens were logged, masked
    assert not TOKEN_RE.findall(out.replace("xoxb-***", "").replace("xapp-***", ""))


async def test_waiting_for_an_event_of_a_run_that_exited_fails_at_once_with_its_output(
    tmp_path: Path,
) -> None:
    run = FleetProcess.start(cwd=tmp_path)  # no .env: it exits 1
    expected = "(?s)exited before event 'fleet started'.*no instance configured"
    with pytest.raises(AssertionError, match=expected):
        await run.wait_for_event("fleet started", within=60)
    assert run.returncode == 1


def test_demo_says_when_dot_env_names_a_back_end_it_does_not_know_and_what_it_runs(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("NANOSLACK_AGENT=opneai\nNANOSLACK_MODEL=gpt-x\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "nanoslack", "demo", "--port", "0"],
        cwd=tmp_path,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    banner: list[str] = []
    try:
        for line in proc.stdout:
            banner.append(line)
            if line.startswith("  ./.env:") or len(banner) > 6:
                break
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    text = "".join(banner)
    assert "agents: script back end (teammates/)" in text, text
    assert (
        "  ./.env: NANOSLACK_AGENT='opneai' is not one of openai, anthropic, command, script: "
        "the fleet uses the script back end (teammates/)"
    ) in text, text
