"""Reply latency of a streamed DM reply (docs/agent-surface.md): from a person's DM to the first
visible characters of the answer, beside the time to the whole answer, streamed
(``NANOSLACK_STREAM=1``) and posted whole (``0``).

One in-process emulator and fleet, one instance (``dana``, ``openai`` back end on the test
model server, which writes its ``send_message`` call of ``--chars`` characters in pieces of
``--piece`` characters, one every ``--piece-ms``: a model producing tokens over time; asked
not to stream, it answers after the same time), ``--people`` people who each DM it
``--rounds`` times, one DM every ``--gap`` seconds, a round's answers in before the next
round. The emulator's watchers see each change of dana's messages: the first one with text
is "first visible", the one that has the whole answer and no longer streams is "whole".

    .venv/bin/python bench/stream_bench.py --people 20 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import drop_proxies, percentile

from nanoslack.config import load_settings
from nanoslack.emulator import Emulator
from nanoslack.slack.fleet import Fleet
from nanoslack.testing.fleet_env import write_fleet_env
from nanoslack.testing.llm_server import (
    Answer,
    LLMServer,
    Request,
    backend_env,
    openai_answer,
    openai_text,
    send,
)


def answer(chars: int) -> str:
    line = "A line of the planned answer, long enough to read as one.\n"
    return (line * (chars // len(line) + 1))[:chars].rstrip() + "."


def model(text: str, piece: int, piece_s: float) -> Any:
    """The model: a ``send_message`` of ``text`` written over time, then done."""
    pieces = len(text) // piece + 1

    def answer_to(request: Request) -> Answer:
        messages = (request.json or {}).get("messages") or [{}]
        if messages[-1].get("role") == "tool":  # its send_message went out: done
            return openai_text()
        call = openai_answer(send(text))
        if (request.json or {}).get("stream"):
            return Answer(json=call.json, chunk_chars=piece, chunk_delay=piece_s)
        return Answer(json=call.json, delay=pieces * piece_s)

    return answer_to


async def run(streamed: bool, args: argparse.Namespace) -> dict[str, Any]:
    people, rounds, gap = args.people, args.rounds, args.gap
    text = answer(args.chars)
    async with Emulator(ack_timeout=3.0) as emu, LLMServer() as llm:
        llm.openai.default = model(text, args.piece, args.piece_ms / 1000)
        humans = [emu.add_user(f"p{i}") for i in range(people)]
        dana = emu.add_app("dana")
        ims = [emu.create_conversation([h.id, dana.bot_user_id], kind="im").id for h in humans]
        posted: dict[str, float] = {}
        first: dict[str, float] = {}
        whole: dict[str, float] = {}
        pending: dict[str, list[str]] = {im: [] for im in ims}  # the post ts each IM waits on

        def watch(channel: str, msg: dict[str, Any]) -> None:
            if msg.get("bot_id") != dana.bot_id or channel not in pending or not pending[channel]:
                return
            asked = pending[channel][0]
            now = time.monotonic()
            if msg.get("text"):
                first.setdefault(asked, now)
            if msg.get("text") == text and not emu.engine.is_streaming(channel, str(msg["ts"])):
                whole[asked] = now
                pending[channel].pop(0)

        emu.engine.watchers.append(watch)
        with tempfile.TemporaryDirectory() as tmp:
            env = write_fleet_env(
                Path(tmp) / ".env",
                emu,
                [dana],
                Path(tmp) / "data" / "nanoslack.db",
                SLACK_OWNER=",".join(h.id for h in humans),
                **backend_env("openai", llm, "sk-bench-0123456789"),
                NANOSLACK_STREAM="1" if streamed else "0",
                NANOSLACK_WORKING_REACTION="",
                NANOSLACK_POST_RATE="0",
                LOG_LEVEL="warning",
            )
            fleet = Fleet(load_settings(env, environ={}))
            await fleet.start()
            try:
                for r in range(rounds):
                    for human, im in zip(humans, ims, strict=True):
                        ts = await emu.post_as_user(human.id, im, f"question {r}")
                        pending[im].append(ts)
                        posted[ts] = time.monotonic()
                        await asyncio.sleep(gap)
                    # A round's answers are in before the next round asks again (one DM, one turn
                    # at a time: a question asked while the last answer is posted joins that turn).
                    await emu.wait_for(lambda: len(whole) == len(posted), timeout=120, interval=0.02)
            finally:
                await fleet.stop()
    to_first = sorted((first[ts] - posted[ts]) * 1000 for ts in posted)
    to_whole = sorted((whole[ts] - posted[ts]) * 1000 for ts in posted)
    return {
        "mode": "streamed" if streamed else "whole post",
        "replies": len(posted),
        "first_p50_ms": round(percentile(to_first, 50), 1),
        "first_p99_ms": round(percentile(to_first, 99), 1),
        "whole_p50_ms": round(percentile(to_whole, 50), 1),
        "whole_p99_ms": round(percentile(to_whole, 99), 1),
    }


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--people", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument(
        "--chars", type=int, default=3800, help="at most 3,900: a whole post is then one message too"
    )
    p.add_argument("--gap", type=float, default=0.05, help="seconds between two DMs")
    p.add_argument("--piece", type=int, default=40, help="characters the model writes at a time")
    p.add_argument("--piece-ms", type=float, default=20.0, help="milliseconds between two pieces")
    args = p.parse_args()
    drop_proxies()
    for streamed in (True, False):
        result = await run(streamed, args)
        print(json.dumps(result))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
