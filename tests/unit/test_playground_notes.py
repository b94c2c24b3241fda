"""The playground's timeline notes, its data folder and its choice of agent back end."""

from __future__ import annotations

from pathlib import Path

from nanoslack.a2a import HOP_LIMIT_REACHED, ROOM_NOT_LISTED
from nanoslack.gate import Verdict
from nanoslack.guard import Admitted
from nanoslack.inbound import Inbound
from nanoslack.pipeline import Outcome
from nanoslack.playground import NoteBook, fresh_data_dir
from nanoslack.playground.stage import llm_settings
from nanoslack.store import StepRow
from nanoslack.store.turns import TurnRow
from tests.factories import inbound

SENDERS = {"slack:bot:B0ELI": "eli", "slack:U0ALICE": "alice"}


def _msg(instance: str, ts: str, *, bot: bool, hop: int = 0) -> Inbound:
    return inbound(
        instance=instance,
        team_id="T1",
        ts=ts,
        user="U0ELIBOT" if bot else "U0ALICE",
        bot_id="B0ELI" if bot else None,
        sender_id=("slack:bot:B0ELI" if hop else "") if bot else "slack:U0ALICE",
        hop=hop,
        hop_limit=3 if hop else 0,
    )


def _book() -> NoteBook:
    return NoteBook(lambda: SENDERS, 3)


def test_each_guard_and_gate_decision_becomes_a_note_without_the_instance_in_its_text() -> None:
    book = _book()
    bot = _msg("fay", "1.0", bot=True)
    book.on_outcome(bot, Outcome("dropped", HOP_LIMIT_REACHED))
    book.on_outcome(bot, Outcome("dropped", ROOM_NOT_LISTED))
    held = _msg("fay", "2.0", bot=True, hop=2)
    book.on_outcome(
        held, Outcome("processed", "held", Admitted(held), None, Verdict("hold", "awaiting approval"))
    )
    kinds = [(n.kind, n.instance) for n in book.notes]
    assert kinds == [
        ("hop_limit", "fay"),
        ("dropped", "fay"),
        ("admitted", "fay"),
        ("approval_requested", "fay"),
    ]
    texts = [n.text for n in book.notes]
    assert "hop limit reached (3/3)" in texts[0]
    assert "SLACK_A2A_ROOMS" in texts[1]
    assert texts[2] == "admitted as slack:bot:B0ELI · hop 2/3"
    assert "approve eli" in texts[3]
    assert all("fay" not in t for t in texts)


def test_a_human_resets_the_hop_count_once_per_message_and_only_when_there_were_hops() -> None:
    book = _book()
    human = _msg("dana", "1.0", bot=False)
    book.on_outcome(human, Outcome("processed", "mention", Admitted(human)))
    assert [n.kind for n in book.notes] == []  # nothing to reset yet
    hop = _msg("dana", "2.0", bot=True, hop=2)
    book.on_outcome(hop, Outcome("processed", "context", Admitted(hop)))
    again = _msg("dana", "3.0", bot=False)
    for instance in ("dana", "eli", "fay"):
        seen = _msg(instance, "3.0", bot=False)
        book.on_outcome(seen, Outcome("processed", "mention", Admitted(seen)))
    resets = [n for n in book.notes if n.kind == "hops_reset"]
    assert [(n.ts, n.text) for n in resets] == [(again.ts, "a human spoke: hop count 2 → 0, bots may go on")]


def test_listeners_hear_every_new_note() -> None:
    book = _book()
    heard: list[str] = []
    book.listeners.append(lambda note: heard.append(note.kind))
    book.add("room_paused", "C0ROOM", None, "", "paused by alice")
    assert heard == ["room_paused"]


def _turn(turn_id: int, status: str = "done", instance: str = "dana") -> TurnRow:
    ts = "5.0"
    alice = "slack:U0ALICE"
    return TurnRow(turn_id, instance, "C0ROOM", ts, ts, alice, status, ts, 1, 1, 0, False, None, 1.0, 2.0)


def _step(step: int, name: str, arguments: str, error: str | None = None) -> StepRow:
    return StepRow(step, 7, step, "tool", name, arguments, 10, 0, 0, 1.0, error, 1.0, None)


def test_a_remember_or_forget_the_turn_kept_is_a_memory_note_under_the_message() -> None:
    book = _book()
    steps = {
        1: [
            _step(1, "remember", '{"text":"deploys are on Thursday ","scope":"self"}'),
            _step(2, "send_message", '{"text":"Noted"}'),
        ],
        2: [
            _step(1, "forget", '{"id":"3"}'),
            _step(2, "remember", '{"text":"the room uses main","scope":"Room"}'),
        ],
        3: [_step(1, "remember", '{"text":"cut sho')],  # arguments cut when recorded
    }

    book.on_turns([_turn(3, "silent"), _turn(2), _turn(1)], lambda turn_id: steps.get(turn_id, []))

    memory = [(n.kind, n.channel, n.ts, n.instance, n.text) for n in book.notes if n.kind != "turn_silent"]
    assert memory == [
        ("memory", "C0ROOM", "5.0", "dana", "🧠 remembered (self): deploys are on Thursday"),
        ("memory", "C0ROOM", "5.0", "dana", "🧠 forgot m3"),
        ("memory", "C0ROOM", "5.0", "dana", "🧠 remembered (room): the room uses main"),
        ("memory", "C0ROOM", "5.0", "dana", '🧠 remember {"text":"cut sho'),
    ]


def test_a_refused_remember_shows_its_refusal_and_a_failed_turns_note_is_not_kept() -> None:
    book = _book()
    refusal = "not remembered: only your owners can ask you to remember something for yourself"
    steps = {
        1: [_step(1, "remember", '{"text":"obey eli","scope":"self"}', error=refusal)],
        2: [_step(1, "forget", '{"id":"m9"}', error="nothing forgotten: no note m9 among yours")],
        3: [_step(1, "remember", '{"text":"lost","scope":"self"}')],
        4: [_step(1, "recall", '{"query":"deploys"}')],
    }

    book.on_turns([_turn(1), _turn(2), _turn(3, "failed"), _turn(4)], lambda turn_id: steps[turn_id])

    notes = [(n.kind, n.text) for n in book.notes if not n.kind.startswith("turn_")]
    assert notes == [
        ("memory_refused", f"🧠 {refusal}"),
        ("memory_refused", "🧠 nothing forgotten: no note m9 among yours"),
        ("memory_refused", "🧠 not kept, the turn failed: remembered (self): lost"),
        ("tool", 'recall {"query":"deploys"}'),
    ]


def test_a_second_run_starts_from_an_empty_data_folder_unless_kept(tmp_path: Path) -> None:
    data = fresh_data_dir(tmp_path / "data" / "demo", keep=False)
    (data / "nanoslack.db").write_text("old")
    assert (fresh_data_dir(data, keep=True) / "nanoslack.db").exists()
    assert not (fresh_data_dir(data, keep=False) / "nanoslack.db").exists()
    assert data.is_dir()


def test_the_crew_uses_an_llm_back_end_only_when_dot_env_configures_one(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    assert llm_settings(env) == {}
    env.write_text("NANOSLACK_AGENT=script\nOPENAI_API_KEY=sk-x\n")
    assert llm_settings(env) == {}
    env.write_text(
        "NANOSLACK_AGENT=openai\nNANOSLACK_MODEL=gpt-x\nOPENAI_API_KEY=sk-x\nSLACK_BOT_TOKEN=xoxb-1\n"
    )
    assert llm_settings(env) == {
        "NANOSLACK_AGENT": "openai",
        "NANOSLACK_MODEL": "gpt-x",
        "OPENAI_API_KEY": "sk-x",
    }
