"""Traces (docs/operations.md "Traces"): with ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, a turn
reaches an OTLP/HTTP receiver on 127.0.0.1 as one trace, its model and tool calls as child
spans with the GenAI attributes; unset, nothing is exported. (Across two processes:
``tests/e2e/test_several_hosts.py``.)"""

from __future__ import annotations

from pathlib import Path

from nanoslack import tracing
from nanoslack.testing.llm_server import LLMServer, openai_answer, openai_text, send
from nanoslack.testing.otlp import OtlpReceiver, ReceivedSpan
from tests.e2e.conftest import FleetFactory, Room
from tests.e2e.helpers import openai_env

MODEL = "gpt-4o-mini"


def _teammates(room: Room) -> Path:
    root = room.tmp / "teammates"
    (root / "dana").mkdir(parents=True, exist_ok=True)
    (root / "dana" / "SOUL.md").write_text("You are Dana, the planner.\n")
    return root


def _turn_done(spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
    return [s for s in spans if s.name == "turn" and s.attributes.get("nanoslack.turn.status") == "done"]


async def test_a_turn_arrives_as_one_trace_with_its_model_and_tool_calls_as_child_spans(
    room: Room, fleet_factory: FleetFactory
) -> None:
    async with OtlpReceiver() as otlp, LLMServer() as llm:
        llm.openai.push(
            openai_answer(send("on it"), tokens=(120, 8)),
            openai_text(tokens=(140, 2), cached=100),
        )
        env = openai_env(
            room.human.id,
            llm,
            _teammates(room),
            NANOSLACK_MODEL=MODEL,
            OTEL_EXPORTER_OTLP_ENDPOINT=otlp.url,
            OTEL_SERVICE_NAME="fleet-a",
            OTEL_BSP_SCHEDULE_DELAY="100",
        )
        await fleet_factory(["dana"], **env)
        await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} plan it")
        (turn,) = await otlp.wait_for(_turn_done)
        spans = await otlp.wait_for(
            lambda s: s if len([x for x in s if x.trace_id == turn.trace_id]) >= 4 else []
        )

    assert turn.parent_span_id == "" and turn.service == "fleet-a"
    assert turn.attributes["nanoslack.instance"] == "dana"
    assert turn.attributes["nanoslack.conversation"] == room.channel
    assert turn.attributes["nanoslack.trigger"] == "person"
    assert turn.attributes["nanoslack.thread"]  # the room thread's key
    children = [s for s in spans if s.trace_id == turn.trace_id and s.span_id != turn.span_id]
    assert all(s.parent_span_id == turn.span_id for s in children), children
    models = [s for s in children if s.name == f"chat {MODEL}"]
    usage = [
        (
            s.attributes["gen_ai.request.model"],
            s.attributes["gen_ai.provider.name"],
            s.attributes["gen_ai.usage.input_tokens"],
            s.attributes["gen_ai.usage.output_tokens"],
            s.attributes["gen_ai.usage.cache_read.input_tokens"],
        )
        for s in models
    ]
    assert sorted(usage) == [(MODEL, "openai", 120, 8, 0), (MODEL, "openai", 140, 2, 100)]
    (tool,) = [s for s in children if s.name.startswith("execute_tool")]
    assert tool.name == "execute_tool send_message"
    assert tool.attributes["gen_ai.tool.name"] == "send_message"
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"


async def test_with_the_variables_unset_nothing_is_exported(room: Room, fleet_factory: FleetFactory) -> None:
    async with OtlpReceiver() as otlp, LLMServer() as llm:
        llm.openai.push(openai_answer(send("on it")), openai_text())
        fleet, _ = await fleet_factory(["dana"], **openai_env(room.human.id, llm, _teammates(room)))
        assert not tracing.enabled()
        await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} plan it")
        await room.emu.wait_for(
            lambda: room.sql("SELECT status FROM turns WHERE instance = 'dana'") == [("done",)], timeout=15
        )
        await fleet.stop()  # what an exporter held would go out now
    assert otlp.requests == 0 and otlp.spans == []


async def test_an_asked_teammates_turn_continues_the_asking_turns_trace(
    room: Room, fleet_factory: FleetFactory
) -> None:
    root = _teammates(room)
    (root / "eli").mkdir(parents=True, exist_ok=True)
    (root / "eli" / "SOUL.md").write_text("You are Eli, the release manager.\n")
    async with OtlpReceiver() as otlp, LLMServer() as llm:
        llm.openai.push(
            openai_answer(("ask_agent", {"to": "eli", "question": "when do we ship?"})),  # dana
            openai_answer(send("Friday")),  # eli
            openai_text(),  # eli
            openai_answer(send("Friday, says eli")),  # dana
            openai_text(),  # dana
        )
        env = openai_env(
            room.human.id,
            llm,
            root,
            NANOSLACK_MODEL=MODEL,
            NANOSLACK_A2A_ALLOW="dana>eli",
            OTEL_EXPORTER_OTLP_ENDPOINT=otlp.url,
            OTEL_BSP_SCHEDULE_DELAY="100",
        )
        await fleet_factory(["dana", "eli"], **env)
        await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} when do we ship?")
        spans = await otlp.wait_for(lambda s: s if len(_turn_done(s)) == 2 else [])

    by_instance = {s.attributes["nanoslack.instance"]: s for s in _turn_done(spans)}
    dana, eli = by_instance["dana"], by_instance["eli"]
    assert eli.trace_id == dana.trace_id
    assert eli.attributes["nanoslack.trigger"] == "ask"
    (ask,) = [s for s in spans if s.name == "execute_tool ask_agent"]
    assert ask.trace_id == dana.trace_id and ask.parent_span_id == dana.span_id
    assert eli.parent_span_id == ask.span_id  # the asked turn hangs under the ask
