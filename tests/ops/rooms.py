"""The open-room tests' shared pieces: a workspace with alice, dana, eli and fay, and the
script run against it (the ``room`` fixture is in ``conftest``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dotenv import dotenv_values

Runner = Callable[..., Any]

HUMAN_NAME = "alice"
# A group DM's id as Slack prints it: never a DM (D…) and never a user (U…).
CHANNEL_ID = re.compile(r"[CG][A-Z0-9]{8,}")


@dataclass
class Room:
    emu: Any
    human: Any
    apps: dict[str, Any]
    tmp: Path
    run: Runner

    @property
    def env_file(self) -> Path:
        return self.tmp / ".env"

    def token_lines(self, *names: str) -> str:
        return "".join(f"SLACK_BOT_TOKEN_{n.upper()}={self.apps[n].bot_token}\n" for n in names)

    def secrets(self) -> list[str]:
        return [v for a in self.apps.values() for v in (a.bot_token, a.app_token)]

    def open(self, *args: str, env: dict[str, str] | None = None, secrets: tuple[str, ...] = ()) -> Any:
        """Run the script; every run, success or failure, must keep every token out of
        its output."""
        full_env = {"SLACK_API_URL": self.emu.api_url, **(env or {})}
        r = self.run("open-a2a-room.py", *args, cwd=self.tmp, env=full_env)
        for secret in [*self.secrets(), *secrets]:
            assert secret not in r.stdout and secret not in r.stderr, "a token was printed"
        return r

    def calls(self, method: str) -> list[Any]:
        return [c for c in self.emu.api_calls if c.method == method]

    def assert_opened(self, channel: str, *instances: str, human: bool = True) -> None:
        """The room exists in Slack with exactly these members, and ``.env`` lists it."""
        [conv] = [c for c in self.emu.conversations() if c.id == channel]
        assert conv.kind == "mpim"
        expected = {self.apps[n].bot_user_id for n in instances} | ({self.human.id} if human else set())
        assert set(conv.members) == expected
        rooms = str(dotenv_values(self.env_file).get("SLACK_A2A_ROOMS") or "")
        assert channel in rooms.split(","), f".env lists {rooms!r}, not {channel}"


def channel_of(r: Any) -> str:
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 1, "stdout must hold only the channel id"
    assert CHANNEL_ID.fullmatch(lines[0]), f"not a channel id: {lines[0]!r}"
    return str(lines[0])
