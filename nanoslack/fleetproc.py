"""``nanoslack run`` as a child process, the one way the tests and benches start it
(here, not under ``tests/``, so the benches need nothing from the test suite).

The child gets a clean environment (none of the caller's Slack, nanoslack, database,
log or proxy keys: its ``.env`` says everything), runs in the ``.env``'s folder, and
writes its stdout and stderr to a log file, which stays behind for a failed test to
be read. The log is read back on demand, from where the last read stopped, so a
chatty child at ``LOG_LEVEL=debug`` costs the caller nothing until it asks; lines
holding a JSON object (``LOG_FORMAT=json``) are parsed into events.

Waiting never blocks the event loop (the emulator usually runs on it) and never
outlasts its deadline; a child that exits while a test waits for one of its events
fails the wait at once, with the end of its output. Standard library only; product
code never imports it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

# The child's configuration comes from its .env alone.
_DROPPED_PREFIXES = ("SLACK_", "NANOSLACK_", "DATABASE_", "LOG_")
_POLL_S = 0.02


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without what would configure a nanoslack child, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(_DROPPED_PREFIXES) and "proxy" not in k.lower()
    }
    return {**env, **(extra or {})}


def _kill_if_running(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


class FleetProcess:
    """One ``nanoslack run`` child; start it with ``FleetProcess.start``."""

    def __init__(self, proc: subprocess.Popen[bytes], log_file: Path) -> None:
        self.proc = proc
        self.log_file = log_file
        self._read_at = 0
        self._partial = b""
        self._lines: list[str] = []
        self._events: list[dict[str, Any]] = []
        # A test that fails before it stops its fleet must not leave it running.
        weakref.finalize(self, _kill_if_running, proc)

    @classmethod
    def start(
        cls,
        env_file: Path | None = None,
        *,
        cwd: Path | None = None,
        failpoints: str = "",
        extra_env: Mapping[str, str] | None = None,
        log_file: Path | None = None,
    ) -> FleetProcess:
        """``nanoslack run --env-file ENV`` in the ``.env``'s folder; with no
        ``env_file``, plain ``nanoslack run`` in ``cwd`` (which reads ``./.env``).
        ``failpoints`` goes to ``NANOSLACK_FAILPOINTS``; ``log_file`` defaults to the
        first free ``runN.log`` in that folder."""
        argv = [sys.executable, "-m", "nanoslack", "run"]
        if env_file is not None:
            argv += ["--env-file", str(env_file)]
        folder = cwd or (env_file.parent if env_file is not None else None)
        if folder is None:
            raise ValueError("FleetProcess.start needs an env_file or a cwd")
        log_file = log_file or _free_log_name(folder)
        extra = {**(extra_env or {}), **({"NANOSLACK_FAILPOINTS": failpoints} if failpoints else {})}
        with log_file.open("wb") as sink:
            proc = subprocess.Popen(
                argv,
                cwd=folder,
                env=child_env(extra),
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        return cls(proc, log_file)

    # -- the process ------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        """The exit code (``-N`` for signal N), or None while it runs."""
        return self.proc.poll()

    @property
    def running(self) -> bool:
        return self.returncode is None

    def send_signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    async def wait(self, within: float = 30) -> int:
        """The exit code once the child exits on its own (a failpoint's SIGKILL, a refusal)."""
        try:
            return await asyncio.to_thread(self.proc.wait, within)
        except subprocess.TimeoutExpired:
            _kill_if_running(self.proc)
            raise AssertionError(f"nanoslack run still running after {within} s\n{self.tail()}") from None

    async def kill(self, within: float = 15) -> int:
        """SIGKILL, as a crash would; the exit code (``-9``)."""
        if self.running:
            self.proc.send_signal(signal.SIGKILL)
        return await self.wait(within)

    async def stop(self, within: float = 15) -> int:
        """SIGTERM, as an operator stops the fleet, and its exit code (0 when clean).
        One that does not stop in time is killed and fails the caller."""
        if self.running:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return await asyncio.to_thread(self.proc.wait, within)
        except subprocess.TimeoutExpired:
            _kill_if_running(self.proc)
            raise AssertionError(
                f"nanoslack run did not stop within {within} s of SIGTERM\n{self.tail()}"
            ) from None

    # -- its output -------------------------------------------------------------------------

    @property
    def output(self) -> str:
        """Everything the child printed so far."""
        self._read()
        return "".join(self._lines) + self._partial.decode("utf-8", errors="replace")

    def tail(self, lines: int = 40) -> str:
        self._read()
        code = self.returncode
        state = "running" if code is None else f"exit {code}"
        last = "".join(self._lines[-lines:]) + self._partial.decode("utf-8", errors="replace")
        return f"--- nanoslack run ({state}), last lines of {self.log_file}:\n{last}"

    def events(self, name: str | None = None, **fields: Any) -> list[dict[str, Any]]:
        """The JSON log lines so far whose ``event`` is ``name`` (any with None) and
        whose other keys equal ``fields``."""
        self._read()
        return [
            e
            for e in self._events
            if (name is None or e.get("event") == name) and all(e.get(k) == v for k, v in fields.items())
        ]

    async def wait_for_event(self, name: str, *, within: float = 30, **fields: Any) -> dict[str, Any]:
        """The first event named ``name`` with ``fields``, once it is logged."""
        found: list[dict[str, Any]] = await self._until(
            lambda: self.events(name, **fields), within, f"event {name!r} {fields or ''}"
        )
        return found[0]

    async def wait_for_output(self, text: str, *, within: float = 30) -> None:
        """Until ``text`` appears anywhere in the output (console-format logs)."""
        await self._until(lambda: text in self.output, within, f"{text!r} in the output")

    async def _until(self, check: Callable[[], Any], within: float, what: str) -> Any:
        deadline = time.monotonic() + within
        while True:
            found = check()
            if found:
                return found
            if not self.running:
                found = check()  # what it wrote just before it exited
                if found:
                    return found
                raise AssertionError(f"nanoslack run exited before {what}\n{self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {within} s\n{self.tail()}")
            await asyncio.sleep(_POLL_S)

    def _read(self) -> None:
        """Take in what the child wrote since the last read; a half-written last line
        waits for its newline."""
        with self.log_file.open("rb") as f:
            f.seek(self._read_at)
            chunk = f.read()
        if not chunk:
            return
        self._read_at += len(chunk)
        complete, newline, self._partial = (self._partial + chunk).rpartition(b"\n")
        if not newline:
            return
        for raw in (complete + newline).splitlines(keepends=True):
            line = raw.decode("utf-8", errors="replace")
            self._lines.append(line)
            if line.startswith("{"):
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if isinstance(event, dict):
                    self._events.append(event)


def _free_log_name(folder: Path) -> Path:
    n = 1
    while (folder / f"run{n}.log").exists():
        n += 1
    return folder / f"run{n}.log"
