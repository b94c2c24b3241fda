"""An agent's own conversation in the store (docs/memory.md): the history bound, the first
turn kept, a cut that moves seldom, notes changed elsewhere, a corrupt row skipped."""

from __future__ import annotations

import dataclasses
import json

from structlog.testing import capture_logs

from nanoslack.agents import Line, Turn, render_prompt, render_thread
from nanoslack.agents.prompt import DELETED_LINE, opening
from nanoslack.agents.teammates import Mate
from nanoslack.store import Store
from nanoslack.turns.history import Recall, ThreadMemory, window

PERSONA = "You are Dana."


def _memory(store: Store, limit: int = 48_000) -> ThreadMemory:
    return ThreadMemory("dana", store, limit, name_of=lambda sender: sender.removeprefix("slack:"))


def _turn(recall: Recall, text: str) -> Turn:
    turn = Turn("dana", "dana", "C1", "1.0", "slack:U1", False, "Group chat", ("alice",), ())
    return recall.apply(turn)


def _record(memory: ThreadMemory, recall: Recall, turn_id: int, prompt_size: int) -> None:
    turn = _turn(recall, "")
    memory.record(recall, turn_id=turn_id, turn=turn, posts=["p" * 10], chars=prompt_size)


def test_a_200_turn_thread_stays_within_the_bound_and_still_shows_its_first_turn(store: Store) -> None:
    memory = _memory(store, limit=10_000)
    store.history.add(
        instance="dana",
        channel="C1",
        thread_key="1.0",
        turn_id=1,
        prompt="FIRST: the codeword is ZEBRA",
        chars=500,
    )
    for turn_id in range(2, 201):
        store.history.add(
            instance="dana",
            channel="C1",
            thread_key="1.0",
            turn_id=turn_id,
            prompt=f"turn {turn_id}",
            chars=500,
        )
    recall = memory.recall("C1", "1.0", persona=PERSONA, owner_dm=False)
    kept = [p.prompt for p in recall.history]
    assert kept[0] == "FIRST: the codeword is ZEBRA"
    assert kept[-1] == "turn 200"
    assert 500 * len(kept) <= 10_000
    assert recall.not_shown == 200 - len(kept)
    text = render_thread(_turn(recall, ""))
    assert f"… {recall.not_shown} earlier turns not shown" in text
    assert text.index("ZEBRA") < text.index("earlier turns not shown") < text.index("turn 200")


def test_the_cut_moves_seldom_so_the_replayed_prefix_stays_the_same_between_cuts() -> None:
    sizes = [500] * 200
    starts = [window(sizes[:n], 10_000) for n in range(1, 201)]
    moves = sum(1 for a, b in zip(starts, starts[1:], strict=False) if a != b)
    # Each cut drops to three quarters of the bound: about one cut in every five turns here.
    assert 0 < moves <= 200 // 4
    assert all(b >= a for a, b in zip(starts, starts[1:], strict=False))


def test_a_note_added_elsewhere_reaches_the_thread_as_a_line_and_its_opening_stays(store: Store) -> None:
    memory = _memory(store)
    store.memories.add(instance="dana", scope="self", text="deploys are on Thursday", asked_by="slack:U1")
    first = memory.recall("C1", "1.0", persona=PERSONA, owner_dm=False)
    assert any("deploys are on Thursday" in line for line in first.memory)
    _record(memory, first, 1, 100)

    store.memories.add(instance="dana", scope="self", text="the release is 2.4", asked_by="operator")
    store.memories.delete([1])
    second = memory.recall("C1", "1.0", persona=PERSONA, owner_dm=False)
    assert second.memory == first.memory  # the opening is as the thread's first turn showed it
    assert second.opening == ""
    assert [line.split(" (")[0] for line in second.notes_changed] == [
        "[Notes changed] + m2",
        "[Notes changed] − m1",
    ]
    assert "asked by an operator): the release is 2.4" in second.notes_changed[0]


def test_a_changed_persona_rebuilds_the_opening_with_the_current_notes(store: Store) -> None:
    memory = _memory(store)
    first = memory.recall("C1", "1.0", persona=PERSONA, owner_dm=False)
    _record(memory, first, 1, 100)
    store.memories.add(instance="dana", scope="self", text="new fact", asked_by="operator")
    again = memory.recall("C1", "1.0", persona="You are Dana, the planner.", owner_dm=False)
    assert again.system == "You are Dana, the planner."
    assert any("new fact" in line for line in again.memory) and again.notes_changed == ()


def test_a_hand_edited_history_row_is_logged_and_skipped_and_the_turn_goes_on(
    store: Store, sql: object
) -> None:
    memory = _memory(store)
    for turn_id in (1, 2):
        store.history.add(
            instance="dana", channel="C1", thread_key="1.0", turn_id=turn_id, prompt=f"turn {turn_id}"
        )
    with store.transaction() as conn:
        from sqlalchemy import text

        conn.execute(text("UPDATE agent_history SET posts = 'not json' WHERE turn_id = 2"))
    with capture_logs() as logs:
        recall = memory.recall("C1", "1.0", persona=PERSONA, owner_dm=False)
    assert [p.prompt for p in recall.history] == ["turn 1"]
    (event,) = [e for e in logs if e["event"] == "agent history unreadable"]
    assert event["channel"] == "C1" and event["thread"] == "1.0"


def _mates(*spec: tuple[str, str, bool]) -> tuple[Mate, ...]:
    return tuple(Mate(name, role, here) for name, role, here in spec)


def test_the_opening_lists_the_teammates_with_their_roles_and_who_is_here(store: Store) -> None:
    memory = _memory(store)
    recall = memory.recall(
        "C1",
        "1.0",
        persona=PERSONA,
        owner_dm=False,
        teammates=_mates(("eli", "reviewer", True), ("fay", "release planner", False)),
    )
    assert recall.memory == ("[Teammates]", "eli — reviewer (here)", "fay — release planner")
    assert "[Teammates]\neli — reviewer (here)\nfay — release planner" in opening(_turn(recall, ""))


def test_a_changed_role_reaches_the_thread_once_as_a_line_and_the_opening_stays_byte_for_byte(
    store: Store,
) -> None:
    memory = _memory(store)
    before = _mates(("eli", "reviewer", True), ("fay", "planner", False))
    first = memory.recall("C1", "1.0", persona=PERSONA, owner_dm=False, teammates=before)
    _record(memory, first, 1, 100)

    after = _mates(("eli", "QA lead", True), ("gus", "tester", False))
    second = memory.recall("C1", "1.0", persona=PERSONA, owner_dm=False, teammates=after)
    assert opening(_turn(second, "")) == opening(_turn(first, ""))
    assert second.notes_changed == (
        "[Teammates changed] ~ eli — QA lead (here)",
        "[Teammates changed] + gus — tester",
        "[Teammates changed] − fay",
    )
    _record(memory, second, 2, 100)

    third = memory.recall("C1", "1.0", persona=PERSONA, owner_dm=False, teammates=after)
    assert (third.notes_changed, third.opening) == ((), "")  # told once
    assert opening(_turn(third, "")) == opening(_turn(first, ""))


def test_a_member_list_that_could_not_be_read_changes_nobodys_here_mark(store: Store) -> None:
    memory = _memory(store)
    first = memory.recall(
        "C1", "1.0", persona=PERSONA, owner_dm=False, teammates=_mates(("eli", "reviewer", True))
    )
    _record(memory, first, 1, 100)
    second = memory.recall(
        "C1",
        "1.0",
        persona=PERSONA,
        owner_dm=False,
        teammates=_mates(("eli", "reviewer", False)),
        members_known=False,
    )
    assert second.notes_changed == ()


def test_a_thread_opened_before_teammates_were_listed_hears_of_them_as_a_change(store: Store) -> None:
    memory = _memory(store)
    store.history.add(
        instance="dana",
        channel="C1",
        thread_key="1.0",
        turn_id=1,
        prompt="hi",
        opening='{"system": "You are Dana.", "notes": []}',
        chars=10,
    )
    recall = memory.recall(
        "C1", "1.0", persona=PERSONA, owner_dm=False, teammates=_mates(("eli", "reviewer", False))
    )
    assert recall.memory == ()  # the opening as it was stored
    assert recall.notes_changed == ("[Teammates changed] + eli — reviewer",)


def test_a_deleted_messages_lines_leave_the_kept_prompt_and_model_messages_and_the_others_stay(
    store: Store,
) -> None:
    memory = _memory(store)
    recall = memory.recall("C1", "1.0", persona=PERSONA, owner_dm=False)
    lines = (
        Line("1.1", "slack:U1", "alice", "the password is\nhunter2"),
        Line("1.2", "slack:U2", "bob", "noted"),
        Line("1.3", "slack:U1", "[edited] alice", "it is hunter3"),
        Line("1.4", "slack:U2", "bob", "ok, hunter2 it is"),
    )
    turn = dataclasses.replace(_turn(recall, ""), transcript=lines)
    prompt = render_prompt(turn)
    model = json.dumps([{"parts": [{"content": prompt, "part_kind": "user-prompt"}]}])
    memory.record(recall, turn_id=1, turn=turn, posts=["sure"], messages=model)

    assert store.history.scrub("dana", "C1", "1.0", ["1.1", "1.3"], DELETED_LINE) == 1

    row = memory.recall("C1", "1.0", persona=PERSONA, owner_dm=False).history[0]
    kept = (
        "alice: [a message was deleted]\nbob: noted\n[edited] alice: [a message was deleted]\n"
        "bob: ok, hunter2 it is\n"
    )
    assert kept in row.prompt and "hunter3" not in row.prompt
    assert json.loads(row.messages)[0]["parts"][0]["content"] == row.prompt
    # Done again (a redelivered deletion), nothing changes.
    assert store.history.scrub("dana", "C1", "1.0", ["1.1", "1.3"], DELETED_LINE) == 0
