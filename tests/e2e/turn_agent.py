"""A scriptable ``command`` agent for the end-to-end turn tests.

The agent is a small Python program written into the test's tmp dir and run by the
real ``command`` back end. Per call it appends one JSON line to ``turns.jsonl`` (its
five ``NANOSLACK_*`` env vars, its stdin and its pid), then:

- blocks while ``<instance>.hold`` exists (at most 30 s): a slow turn, or a turn a
  test kills the fleet under;
- exits 3 when ``<instance>.fail`` exists (a failed turn);
- prints ``<instance>.reply`` if present, with ``{turn}`` replaced by how many turns
  this instance has run (1-based); no file is silence.
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

AGENT_SOURCE = r"""
import json, os, sys, time
from pathlib import Path

here = Path(__file__).resolve().parent
instance = os.environ["NANOSLACK_INSTANCE"]
record = {
    key: os.environ.get("NANOSLACK_" + key.upper(), "<unset>")
    for key in ("instance", "channel", "thread_ts", "sender", "wrapping_up", "session")
}
record["stdin"] = sys.stdin.read()
record["pid"] = os.getpid()
log = here / "turns.jsonl"
# One write with O_APPEND: concurrent agents never interleave their lines.
fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
os.write(fd, (json.dumps(record) + "\n").encode())
os.close(fd)
turn = sum(1 for line in log.read_text().splitlines() if json.loads(line)["instance"] == instance)
hold = here / (instance + ".hold")
deadline = time.monotonic() + 30
while hold.exists() and time.monotonic() < deadline:
    time.sleep(0.02)
if (here / (instance + ".fail")).exists():
    sys.stderr.write("agent gave up")
    sys.exit(3)
reply = here / (instance + ".reply")
if reply.exists():
    sys.stdout.write(reply.read_text().replace("{turn}", str(turn)))
"""


@dataclass
class TurnAgent:
    """The agent's files in ``folder``; ``command`` is what NANOSLACK_AGENT_COMMAND runs."""

    folder: Path

    @classmethod
    def install(cls, folder: Path) -> TurnAgent:
        (folder / "agent.py").write_text(AGENT_SOURCE)
        return cls(folder)

    @property
    def command(self) -> str:
        return f"{shlex.quote(sys.executable)} {shlex.quote(str(self.folder / 'agent.py'))}"

    def env(self, **extra: str) -> dict[str, str]:
        """Fleet keys for ``fleet_factory(..., **agent.env())``."""
        return {
            "NANOSLACK_AGENT": "command",
            "NANOSLACK_AGENT_COMMAND": self.command,
            "NANOSLACK_AGENT_TIMEOUT": "60",
            **extra,
        }

    def reply(self, instance: str, text: str) -> None:
        (self.folder / f"{instance}.reply").write_text(text)

    def hold(self, instance: str) -> None:
        (self.folder / f"{instance}.hold").touch()

    def release(self, instance: str) -> None:
        (self.folder / f"{instance}.hold").unlink(missing_ok=True)

    def fail(self, instance: str) -> None:
        (self.folder / f"{instance}.fail").touch()

    def calls(self, instance: str | None = None) -> list[dict[str, Any]]:
        log = self.folder / "turns.jsonl"
        if not log.exists():
            return []
        records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        return [r for r in records if instance in (None, r["instance"])]
