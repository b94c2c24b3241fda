"""Cost in dollars (docs/agents.md, docs/operations.md "Spend"): each model call's price from
``genai-prices`` kept per step, ``nanoslack spend`` per instance, conversation and routine,
``nanoslack_agent_cost_usd_total``; a model the table does not know counts tokens only and
is said once. The model server of ``nanoslack.testing.llm_server`` answers as the configured model."""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path
from typing import Any

import genai_prices
import pytest

from nanoslack.logs import configure_logging
from nanoslack.ops import admin
from nanoslack.ops import routines as routines_cli
from nanoslack.ops import spend as spend_cli
from nanoslack.testing.llm_server import LLMServer, Request, openai_answer, openai_text, send
from tests.e2e.conftest import FleetFactory, Room
from tests.e2e.helpers import openai_env
from tests.e2e.test_metrics import scrape, value

PRICED = "gpt-4o-mini"


def _teammates(room: Room, routine: str = "") -> Path:
    root = room.tmp / "teammates"
    (root / "dana").mkdir(parents=True, exist_ok=True)
    (root / "dana" / "SOUL.md").write_text("You are Dana, the planner.\n")
    if routine:
        (root / "dana" / "routines.toml").write_text(routine)
    return root


def _answer(request: Request) -> Any:
    """Each turn: a post (1,000 tokens in, 100 out), then done (500 in, 10 out)."""
    if request.tool_results():
        return openai_text(tokens=(500, 10))
    return openai_answer(send("on it"), tokens=(1000, 100))


def _price(tokens_in: int, tokens_out: int) -> float:
    usage = genai_prices.Usage(input_tokens=tokens_in, output_tokens=tokens_out)
    return float(genai_prices.calc_price(usage, PRICED).total_price)


def _model_steps(room: Room) -> list[tuple[Any, ...]]:
    return room.sql(
        "SELECT name, tokens, cost_usd FROM turn_steps WHERE kind = 'model' ORDER BY turn_id, step"
    )


def _spend(room: Room, *argv: str) -> str:
    out = io.StringIO()
    env_file = room.tmp / ".env"
    assert spend_cli.main(["--db", str(room.db), "--env-file", str(env_file), *argv], out=out) == 0
    return out.getvalue()


def _row(listing: str, first: str) -> list[str]:
    (line,) = [line for line in listing.splitlines() if line.split()[:1] == [first]]
    return line.split()


async def test_a_priced_models_steps_keep_their_cost_and_spend_shows_instance_room_and_routine(
    room: Room, fleet_factory: FleetFactory
) -> None:
    routine = f'[[routine]]\nname = "plan"\nevery = "24h"\nchannel = "{room.channel}"\nprompt = "Plan."\n'
    teammates = _teammates(room, routine)
    async with LLMServer() as llm:
        llm.openai.default = _answer
        env = openai_env(
            room.human.id,
            llm,
            teammates,
            NANOSLACK_MODEL=PRICED,
            NANOSLACK_DAILY_USD="5",
            NANOSLACK_ROOM_TOKENS="90000",
            NANOSLACK_METRICS_ADDR="127.0.0.1:0",
        )
        fleet, _ = await fleet_factory(["dana"], **env)
        await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} plan it")
        await room.emu.wait_for(lambda: len(_model_steps(room)) == 2, timeout=15)
        # The routine's run, asked for now as an operator would.
        await room.emu.wait_for(lambda: room.sql("SELECT name FROM routines") == [("plan",)], timeout=15)
        assert (
            routines_cli.main(
                ["--db", str(room.db), "--env-file", str(room.tmp / ".env"), "run", "dana", "plan"],
                out=io.StringIO(),
            )
            == 0
        )
        await room.emu.wait_for(lambda: len(_model_steps(room)) == 4, timeout=20)
        await room.emu.wait_for(
            lambda: room.sql("SELECT count(*) FROM turns WHERE status = 'done'") == [(2,)], timeout=10
        )
        samples = await scrape(fleet.health_server.url)

    turn_cost = _price(1000, 100) + _price(500, 10)
    steps = _model_steps(room)
    assert [(name, tokens) for name, tokens, _ in steps] == [(PRICED, 1100), (PRICED, 510)] * 2
    assert [cost for *_, cost in steps] == pytest.approx([_price(1000, 100), _price(500, 10)] * 2)
    assert value(samples, "nanoslack_agent_cost_usd_total", instance="dana") == pytest.approx(2 * turn_cost)

    listing = _spend(room)
    dana = _row(listing, "dana")
    # turns, tokens, token cap, dollars, dollar cap, unpriced calls
    assert dana == ["dana", "2", "3220", "none", f"${2 * turn_cost:.4f}", "$5.00", "0"], listing
    # Both turns were in the room (the routine posts there); the room's caps stand beside it.
    assert _row(listing, room.channel) == [
        room.channel,
        "2",
        "3220",
        "90000",
        f"${2 * turn_cost:.4f}",
        "none",
        "0",
    ]
    assert _row(listing, "dana/plan") == ["dana/plan", "1", "1610", "none", f"${turn_cost:.4f}", "0"]
    assert "today" in listing.splitlines()[0]
    # Each step's price is shown with it.
    out = io.StringIO()
    assert admin.turns_main(["--db", str(room.db), "--steps", "1"], out=out) == 0
    model_lines = [line.split() for line in out.getvalue().splitlines() if " model " in line]
    assert [line[4] for line in model_lines] == [f"${_price(1000, 100):.4f}", f"${_price(500, 10):.4f}"]
    assert _row(_spend(room, "--days", "7"), "dana")[1:3] == ["2", "3220"]


async def test_a_model_the_price_table_does_not_know_counts_tokens_only_and_is_said_once(
    room: Room, fleet_factory: FleetFactory
) -> None:
    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    model = f"house-model-{uuid.uuid4().hex[:8]}"  # said once per process: a name no other test uses
    async with LLMServer() as llm:
        llm.openai.default = _answer
        env = openai_env(
            room.human.id, llm, _teammates(room), NANOSLACK_MODEL=model, NANOSLACK_DAILY_USD="0.01"
        )
        await fleet_factory(["dana"], **env)
        for n in (1, 2):
            await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} job {n}")
            await room.emu.wait_for(lambda n=n: len(_model_steps(room)) == 2 * n, timeout=15)
        await room.emu.wait_for(
            lambda: room.sql("SELECT count(*) FROM turns WHERE status = 'done'") == [(2,)], timeout=10
        )

    assert _model_steps(room) == [(model, 1100, None), (model, 510, None)] * 2
    said = [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]
    said = [e for e in said if e.get("event") == "model not priced"]
    assert [(e["model"], e["counts"]) for e in said] == [(model, "tokens only")]
    # Its tokens count; a dollar cap it can never reach lets it run (both turns answered).
    assert _row(_spend(room), "dana") == ["dana", "2", "3220", "none", "$0.0000", "$0.0100", "4"]
