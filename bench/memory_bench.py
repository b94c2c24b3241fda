"""What remembering costs (docs/memory.md): a long thread against a local model server that
reports cached tokens the way OpenAI does.

One ``openai`` instance (the real fleet, in process, on the embedded emulator and a
SQLite store) answers ``--turns`` questions in one thread; each turn makes two model calls
(a ``send_message``, then a plain answer). Its opening lists one teammate (eli, named by
``NANOSLACK_A2A_ALLOW``), whose role is edited half way: the thread hears of it as a
``[Teammates changed]`` line, its opening unchanged. The model server counts a request's input
tokens (4 characters a token) and, like OpenAI's automatic prompt cache, reports as
cached the longest prefix it has seen before, in 128-token blocks once it is 1,024 tokens
or more. Printed, as one JSON object:

- ``cached_share_from_turn_3``: of all input tokens of turns 3 and on, the share that was
  a repeated prefix (the goal is >= 0.90);
- ``history_bytes_per_1000_turns``: what ``agent_history`` holds per 1,000 turns;
- ``history_wall_ms`` / ``history_cpu_ms``: the turn's added time for reading its history
  (``ThreadMemory.recall``), writing its row (``ThreadMemory.record``), the LLM back end's
  parse of it into model messages (``replay``) and its JSON of the new ones (``keep``),
  p50/p99 over the turns after the first (whose ``keep`` builds pydantic's serialiser
  once per process: ``first_turn_cpu_ms``), as wall time and as the CPU time of the thread
  (what it costs on a loaded machine). The goal is <= 5 ms p99.

    .venv/bin/python bench/memory_bench.py --turns 30
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from _common import drop_proxies, percentile, serve_model
from aiohttp import web

from nanoslack.agents import llm as llm_module
from nanoslack.config import load_settings
from nanoslack.emulator import Emulator
from nanoslack.logs import configure_logging
from nanoslack.ops.envfile import write_env
from nanoslack.slack.fleet import Fleet
from nanoslack.store import Store
from nanoslack.turns import history as history_module

BLOCK = 128
MIN_CACHED = 1024
PERSONA = "You are Dana, the planner of a small team. " * 60  # a realistic system prompt (~2.6k chars)


class CachingModel:
    """An OpenAI-compatible endpoint with OpenAI's prefix cache, counted in characters / 4."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.calls: list[tuple[int, int]] = []  # (input tokens, cached tokens) per request
        self._turn_step = 0

    def _cached(self, text: str) -> int:
        best = 0
        for earlier in self.seen:
            n = 0
            for a, b in zip(earlier, text, strict=False):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        tokens = best // 4
        return (tokens // BLOCK) * BLOCK if tokens >= MIN_CACHED else 0

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        text = json.dumps([body.get("tools"), body["messages"]], ensure_ascii=False)
        tokens, cached = len(text) // 4, self._cached(text)
        self.seen.append(text)
        self.calls.append((tokens, cached))
        last = body["messages"][-1]
        if last["role"] == "user":  # the turn's first call: post an answer
            call = {"name": "send_message", "arguments": json.dumps({"text": f"answer {len(self.calls)}"})}
            message: dict[str, Any] = {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": f"call_{len(self.calls)}", "type": "function", "function": call}],
            }
        else:
            message = {"role": "assistant", "content": "done"}
        usage = {
            "prompt_tokens": tokens,
            "completion_tokens": 8,
            "total_tokens": tokens + 8,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        return web.json_response(
            {
                "id": "c",
                "object": "chat.completion",
                "created": 0,
                "model": "m",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": usage,
            }
        )


def _timed(samples: list[tuple[float, float]], fn: Callable[..., Any]) -> Callable[..., Any]:
    """Each call's (wall ms, CPU ms of this thread): on a loaded machine the wall clock
    mostly measures the wait for a core, the CPU time what the call itself costs."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            samples.append(((time.perf_counter() - start) * 1000, (time.thread_time() - cpu) * 1000))

    return wrapper


def _time_in(module: ModuleType, name: str, samples: list[tuple[float, float]]) -> None:
    """Time the function ``module`` calls as ``name`` where ``module`` looks it up: a name it
    imported from elsewhere (llm.py's ``replay``/``keep``, not re-exported), so set by name."""
    setattr(module, name, _timed(samples, getattr(module, name)))


def _p(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"p50": round(percentile(ordered, 50), 2), "p99": round(percentile(ordered, 99), 2)}


async def run(turns: int) -> dict[str, Any]:
    model = CachingModel()
    runner, model_url = await serve_model(model.handle)

    recall_ms: list[tuple[float, float]] = []
    record_ms: list[tuple[float, float]] = []
    replay_ms: list[tuple[float, float]] = []
    keep_ms: list[tuple[float, float]] = []
    memory = history_module.ThreadMemory
    memory.recall = _timed(recall_ms, memory.recall)  # type: ignore[method-assign]
    memory.record = _timed(record_ms, memory.record)  # type: ignore[method-assign]
    # The LLM back end's side: the kept JSON parsed into model messages, and written.
    _time_in(llm_module, "replay", replay_ms)
    _time_in(llm_module, "keep", keep_ms)

    tmp = Path(tempfile.mkdtemp(prefix="memory-bench-"))
    (tmp / "teammates" / "dana").mkdir(parents=True)
    (tmp / "teammates" / "dana" / "SOUL.md").write_text(PERSONA)
    (tmp / "teammates" / "eli").mkdir(parents=True)
    (tmp / "teammates" / "eli" / "SOUL.md").write_text("---\nrole: reviewer\n---\nYou are Eli.\n")
    db = tmp / "nanoslack.db"
    async with Emulator() as emu:
        alice, dana, eli = emu.add_user("alice"), emu.add_app("dana"), emu.add_app("eli")
        room = emu.create_conversation([alice.id, dana.bot_user_id, eli.bot_user_id], kind="mpim").id
        env = tmp / ".env"
        write_env(
            env,
            {
                "SLACK_API_URL": emu.api_url,
                "NANOSLACK_DB": str(db),
                "SLACK_INSTANCES": "dana",
                "SLACK_BOT_TOKEN_DANA": dana.bot_token,
                "SLACK_APP_TOKEN_DANA": dana.app_token,
                "SLACK_OWNER": alice.id,
                "NANOSLACK_AGENT": "openai",
                "NANOSLACK_MODEL": "m",
                "OPENAI_BASE_URL": model_url,
                "OPENAI_API_KEY": "sk-bench-000000",
                "NANOSLACK_TEAMMATES": str(tmp / "teammates"),
                "NANOSLACK_A2A_ALLOW": "dana>eli",
                "LOG_LEVEL": "warning",
            },
            replace=True,
        )
        fleet = Fleet(load_settings(env, environ={}))
        await fleet.start()
        try:
            top = None
            for i in range(turns):
                if i == turns // 2:  # a teammate's new role: a line of the next turn, not a new opening
                    (tmp / "teammates" / "eli" / "SOUL.md").write_text(
                        "---\nrole: reviewer and release QA\n---\nYou are Eli.\n"
                    )
                ts = await emu.post_as_user(
                    alice.id, room, f"<@{dana.bot_user_id}> question {i}: what next?", thread_ts=top
                )
                top = top or ts
                deadline = time.monotonic() + 60
                while len(model.calls) < 2 * (i + 1):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"turn {i + 1} never called the model twice")
                    await asyncio.sleep(0.01)
            await asyncio.sleep(0.5)  # the last turn's recording
        finally:
            await fleet.stop()
    await runner.cleanup()

    later = model.calls[4:]  # turns 3 and on
    with Store.open(f"sqlite:///{db}") as store:
        size, rows = store.history.footprint()
    first = [x[0][1] for x in (recall_ms, record_ms, replay_ms, keep_ms)]
    recall_ms, record_ms, replay_ms, keep_ms = (x[1:] for x in (recall_ms, record_ms, replay_ms, keep_ms))
    pairs = list(zip(recall_ms, record_ms, replay_ms, keep_ms, strict=False))
    return {
        "turns": turns,
        "model_calls": len(model.calls),
        "cached_share_from_turn_3": round(sum(c for _, c in later) / max(1, sum(t for t, _ in later)), 3),
        "input_tokens_last_call": model.calls[-1][0],
        # eli's new role in the last request: told once, as a line the history replays (1).
        "teammates_changed_lines": model.seen[-1].count("[Teammates changed] ~ eli"),
        "history_rows": rows,
        "history_bytes_per_1000_turns": int(size / max(1, rows) * 1000),
        "first_turn_cpu_ms": round(sum(first), 2),
        "history_wall_ms": {
            "recall": _p([w for w, _ in recall_ms]),
            "record": _p([w for w, _ in record_ms]),
            "replay": _p([w for w, _ in replay_ms]),
            "keep": _p([w for w, _ in keep_ms]),
            "all": _p([sum(x[0] for x in four) for four in pairs]),
        },
        "history_cpu_ms": {
            "recall": _p([c for _, c in recall_ms]),
            "record": _p([c for _, c in record_ms]),
            "replay": _p([c for _, c in replay_ms]),
            "keep": _p([c for _, c in keep_ms]),
            "all": _p([sum(x[1] for x in four) for four in pairs]),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=30)
    args = parser.parse_args()
    drop_proxies()
    configure_logging("warning", "console", stream=sys.stderr)
    print(json.dumps(asyncio.run(run(args.turns)), indent=2))


if __name__ == "__main__":
    main()
