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
