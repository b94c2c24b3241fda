"""A routine's gate (docs/routines.md): a command run before the model is called.

Exit 0 wakes the agent, its stdout (cut to ``MAX_OUTPUT`` characters) joining the
prompt; exit 1 skips the run without a model call; anything else, or no exit within
``TIMEOUT_S``, fails the run. The gate runs through the shell from the teammate folder,
in a process group of its own, killed whole on a timeout or a cancel (as the
``command`` back end's agent is).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path

from nanoslack.agents.command import MCP_TOKEN_ENV, MCP_URL_ENV, kill_group, spawn_in_group

TIMEOUT_S = 60.0
MAX_OUTPUT = 4_000
CUT_NOTE = "\n… [gate output cut]"


@dataclass(frozen=True, slots=True)
class GateResult:
    verdict: str  # "wake", "skip" or "fail"
    output: str = ""  # stdout when it wakes, cut
    reason: str = ""  # why it failed


async def run_gate(
    command: str, folder: Path, *, instance: str, routine: str, limit_s: float = TIMEOUT_S
) -> GateResult:
    env = dict(os.environ)
    env.pop(MCP_URL_ENV, None)
    env.pop(MCP_TOKEN_ENV, None)
    env.update(NANOSLACK_INSTANCE=instance, NANOSLACK_ROUTINE=routine)
    try:
        proc = await spawn_in_group(
            command, env, cwd=folder, stdin=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
        )
    except OSError as exc:
        return GateResult("fail", reason=f"gate cannot start: {exc.strerror or exc}")
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), limit_s)
    except TimeoutError:
        await kill_group(proc)
        return GateResult("fail", reason=f"gate timed out after {limit_s:g} s")
    except BaseException:
        await kill_group(proc)
        raise
    code = proc.returncode
    if code == 0:
        text = out.decode("utf-8", "replace").strip()
        if len(text) > MAX_OUTPUT:
            text = text[:MAX_OUTPUT] + CUT_NOTE
        return GateResult("wake", output=text)
    if code == 1:
        return GateResult("skip")
    return GateResult("fail", reason=f"gate exited with {code}")
