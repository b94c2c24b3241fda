"""Team rooms end to end (docs/team-rooms.md): reports put tasks on the room's board and take them
off (one message, edited), a silent task's one ping, ``nanoslack board``, votes answered by
people's clicks and bots' ballots (reminded, closed naming the abstainers, or at once when
everyone has answered), and directives in a chain room. The fleet runs script agents
whose rules call the team tools; time is moved in SQL (``tests/e2e/team.py``).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nanoslack.emulator import App, Emulator, User
from nanoslack.ops import admin
from nanoslack.store import Store, sqlite_url
from nanoslack.team.notes import vote_lines
from nanoslack.testing.fleet_env import sql
from tests.e2e import team
from tests.e2e.conftest import Room

ELI_TAKES_THE_PARSER = {
    "match": "parser",
    "from": "human",
    "calls": [
        {
            "tool": "report",
            "arguments": {
                "status": "working",
                "text": "write the parser",
                "progress_done": 1,
                "progress_total": 3,
                "step": "sketching the API",
            },
        }
    ],
    "reply": "On it.",
}
ELI_FINISHES = {
    "match": r"done\?",
    "from": "human",
    "calls": [{"tool": "report", "arguments": {"status": "completed", "text": "parser merged"}}],
    "reply": "Done: merged.",
}
TASK_LINE = "• *eli* — write the parser · 1/3 · sketching the API · just now"


@dataclass
class Crew:
    """alice with dana, eli and fay in one allowlisted group DM, opened public."""

    emu: Emulator
    alice: User
    apps: dict[str, App]
    channel: str
    tmp: Path

    @property
    def db(self) -> Path:
        return self.tmp / "data" / "nanoslack.db"

    def mention(self, name: str) -> str:
        return f"<@{self.apps[name].bot_user_id}>"

    def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        return sql(self.db, query, *params)

    async def ask(self, text: str, thread_ts: str | None = None) -> str:
        return await self.emu.post_as_user(self.alice.id, self.channel, text, thread_ts=thread_ts)


@pytest.fixture
def crew(room: Room) -> Crew:
    members = [room.human.id, *(app.bot_user_id for app in room.apps.values())]
    conv = room.emu.create_conversation(members, kind="mpim")
    return Crew(room.emu, room.human, room.apps, conv.id, room.tmp)


async def start(
    crew: Crew, fleet_factory: Any, *, kind: str = "mention", lead: str | None = None, **env: str
) -> None:
    names = ["dana", "eli", "fay"]
    team.open_team_room(crew.db, crew.channel, names, kind=kind, lead=lead)
    await fleet_factory(names, SLACK_A2A_ROOMS=crew.channel, SLACK_OWNER=crew.alice.id, **env)


# -- reports and the board -------------------------------------------------------------------


async def _task_on_the_board(crew: Crew, fleet_factory: Any, **env: str) -> str:
    await start(
        crew, fleet_factory, **team.rules_env(crew.tmp, "eli", [ELI_TAKES_THE_PARSER, ELI_FINISHES]), **env
    )
    ask = await crew.ask(f"{crew.mention('eli')} please write the parser")
    await crew.emu.wait_for(lambda: TASK_LINE in (team.board_text(crew.emu, crew.channel) or ""), timeout=15)
    return ask


async def test_a_working_report_puts_a_task_on_the_board_and_a_completed_one_takes_it_off_by_an_edit(
    crew: Crew, fleet_factory: Any
) -> None:
    ask = await _task_on_the_board(crew, fleet_factory)
    assert team.board_text(crew.emu, crew.channel) == f"{team.BOARD_TITLE} · 1 open\n{TASK_LINE}"
    (task,) = crew.sql("SELECT request_ts, instance, status, thread_ts FROM tasks")
    assert task == (ask, "eli", "working", ask)
    # Posted by eli's app, as a fleet notice, at the top of the room.
    (board,) = team.boards(crew.emu, crew.channel)
    assert board["bot_id"] == crew.apps["eli"].bot_id and not board.get("thread_ts")

    await crew.ask(f"{crew.mention('eli')} done?", thread_ts=ask)
    await crew.emu.wait_for(lambda: team.board_text(crew.emu, crew.channel) == team.BOARD_EMPTY, timeout=15)
    (board,) = team.boards(crew.emu, crew.channel)  # the same message, edited
    assert board.get("edited")
    posts = [
        c for c in crew.emu.api_calls if c.method == "chat.postMessage" and "Task board" in str(c.params)
    ]
    assert len(posts) == 1
    assert crew.sql("SELECT status, closed_at IS NOT NULL FROM tasks") == [("completed", 1)]
    eli = [
        m["text"]
        for m in team.thread(crew.emu, crew.channel, ask)
        if m.get("bot_id") == crew.apps["eli"].bot_id
    ]
    assert eli == ["On it.", "Done: merged."]


async def test_a_silent_task_gets_exactly_one_ping_and_later_no_longer_counts_as_open(
    crew: Crew, fleet_factory: Any
) -> None:
    ask = await _task_on_the_board(crew, fleet_factory)
    team.age_tasks(crew.db, 31 * 60)
    await crew.emu.wait_for(lambda: team.thread_texts(crew.emu, crew.channel, ask, "⏰"), timeout=15)
    (ping,) = team.thread_texts(crew.emu, crew.channel, ask, "⏰")
    assert ping.startswith("⏰ @eli, your task “write the parser” has been quiet for 30 min")
    # Still quiet, later still: no second ping; past two hours it leaves the board.
    team.age_tasks(crew.db, 30 * 60)
    team.age_tasks(crew.db, 60 * 60)
    await crew.emu.wait_for(lambda: team.board_text(crew.emu, crew.channel) == team.BOARD_EMPTY, timeout=15)
    assert len(team.thread_texts(crew.emu, crew.channel, ask, "⏰")) == 1
    # Never marked done: nobody said it was.
    assert crew.sql("SELECT status, stale_at IS NOT NULL, closed_at FROM tasks") == [("working", 1, None)]


async def test_nanoslack_board_prints_what_the_board_message_says(crew: Crew, fleet_factory: Any) -> None:
    await _task_on_the_board(crew, fleet_factory)
    out = io.StringIO()
    assert admin.board_main([crew.channel, "--db", str(crew.db)], out=out) == 0
    assert out.getvalue() == f"{team.board_text(crew.emu, crew.channel)}\n"
    out = io.StringIO()
    assert admin.board_main(["G0NOBOARD", "--db", str(crew.db)], out=out) == 0
    assert out.getvalue() == f"{team.BOARD_EMPTY}\n"


# -- votes -------------------------------------------------------------------------------------

DANA_ASKS = {
    "match": "vote",
    "from": "human",
    "calls": [
        {"tool": "vote", "arguments": {"question": "Ship on Friday?"}},
        {"tool": "ballot", "arguments": {"choice": "yes"}},
    ],
    "reply": None,
}
# A bot woken by the vote changes its mind: the second ballot replaces the first.
ELI_VOTES = {
    "match": "Vote from dana",
    "from": "bot",
    "calls": [
        {"tool": "ballot", "arguments": {"choice": "no"}},
        {"tool": "ballot", "arguments": {"choice": "YES"}},
    ],
    "reply": None,
}
FAY_VOTES = {
    "match": "Vote from dana",
    "from": "bot",
    "calls": [{"tool": "ballot", "arguments": {"choice": "no"}}],
}


async def _vote_posted(crew: Crew) -> tuple[str, dict[str, Any]]:
    ask = await crew.ask(f"{crew.mention('dana')} let's vote on shipping Friday")
    message = await crew.emu.wait_for(lambda: team.vote_message(crew.emu, crew.channel, ask), timeout=15)
    return ask, message


async def _click(crew: Crew, message: dict[str, Any], label: str) -> None:
    action = team.buttons(message)[label]
    await crew.emu.click_button(crew.alice.id, crew.channel, message["ts"], action)
    voter = f"slack:{crew.alice.id}"
    await crew.emu.wait_for(lambda: team.ballots(crew.db).get(voter) == label, timeout=15)


async def test_a_vote_counts_clicks_and_ballots_reminds_the_silent_one_and_names_the_abstainer(
    crew: Crew, fleet_factory: Any
) -> None:
    await start(
        crew,
        fleet_factory,
        NANOSLACK_VOTE_REMIND="600",
        NANOSLACK_VOTE_CLOSE="600",
        **team.rules_env(crew.tmp, "dana", [DANA_ASKS]),
        **team.rules_env(crew.tmp, "eli", [ELI_VOTES]),
    )
    ask, message = await _vote_posted(crew)
    assert message["bot_id"] == crew.apps["dana"].bot_id
    assert message["text"] == "🗳️ Vote from dana: Ship on Friday? (options: yes, no)"
    assert list(team.buttons(message)) == ["yes", "no"]
    # alice changes her mind too: one ballot each, the second click replaces the first.
    await _click(crew, message, "no")
    await _click(crew, message, "yes")
    alice = f"slack:{crew.alice.id}"
    everyone_but_fay = {alice: "yes", "dana": "yes", "eli": "yes"}
    await crew.emu.wait_for(
        lambda: team.ballots(crew.db) == everyone_but_fay and team.turns_done(crew.db, "fay") == 1, timeout=15
    )
    (vote,) = crew.sql("SELECT ts, status, humans, bots FROM votes")
    assert vote == (message["ts"], "open", f'["{crew.alice.id}"]', '["dana", "eli", "fay"]')

    team.age_votes(crew.db, 601)
    await crew.emu.wait_for(lambda: team.thread_texts(crew.emu, crew.channel, ask, "⏳"), timeout=15)
    (reminder,) = team.thread_texts(crew.emu, crew.channel, ask, "⏳")
    assert reminder == "⏳ Vote still open: “Ship on Friday?” — not answered yet: @fay. It closes in 10 min."

    team.age_votes(crew.db, 601)
    await crew.emu.wait_for(
        lambda: team.thread_texts(crew.emu, crew.channel, ask, "🗳️ Vote closed"), timeout=15
    )
    (result,) = team.thread_texts(crew.emu, crew.channel, ask, "🗳️ Vote closed")
    assert result == (
        f"🗳️ Vote closed: “Ship on Friday?” — yes 3 (<@{crew.alice.id}>, @dana, @eli) · no 0 → *yes*."
        " Abstained: @fay."
    )
    assert crew.sql("SELECT status, result FROM votes") == [("closed", result)]
    # The question's buttons gave way to the result.
    closed = await crew.emu.wait_for(
        lambda: (m := team.vote_message(crew.emu, crew.channel, ask)) and m.get("edited") and m, timeout=15
    )
    assert team.buttons(closed) == {}
    assert len(team.thread_texts(crew.emu, crew.channel, ask, "⏳")) == 1


async def test_a_vote_everyone_answered_closes_at_once(crew: Crew, fleet_factory: Any) -> None:
    await start(
        crew,
        fleet_factory,
        **team.rules_env(crew.tmp, "dana", [DANA_ASKS]),
        **team.rules_env(crew.tmp, "eli", [ELI_VOTES]),
        **team.rules_env(crew.tmp, "fay", [FAY_VOTES]),
    )
    ask, message = await _vote_posted(crew)
    await crew.emu.wait_for(lambda: len(team.ballots(crew.db)) == 3, timeout=15)
    await crew.emu.click_button(crew.alice.id, crew.channel, message["ts"], team.buttons(message)["no"])
    await crew.emu.wait_for(
        lambda: team.thread_texts(crew.emu, crew.channel, ask, "🗳️ Vote closed"), timeout=15
    )
    (result,) = team.thread_texts(crew.emu, crew.channel, ask, "🗳️ Vote closed")
    assert result.endswith("→ a tie between yes and no. Everyone answered.")
    assert team.thread_texts(crew.emu, crew.channel, ask, "⏳") == []  # well before any reminder


async def test_a_bot_turn_lists_the_open_votes_it_has_not_answered(crew: Crew, fleet_factory: Any) -> None:
    await start(crew, fleet_factory, **team.rules_env(crew.tmp, "dana", [DANA_ASKS]))
    _, message = await _vote_posted(crew)
    # eli (silent) was woken by the vote; its turn's prompt is what a model would read.
    await crew.emu.wait_for(lambda: team.turns_done(crew.db, "eli") == 1, timeout=15)
    with Store.open(sqlite_url(str(crew.db))) as store:
        assert vote_lines(store, "eli", crew.channel) == [
            f"vote {message['ts']}: Ship on Friday? (options: yes, no)"
        ]
        assert vote_lines(store, "dana", crew.channel) == []  # dana answered it


# -- chain rooms -----------------------------------------------------------------------------------


async def test_in_a_chain_room_a_workers_directive_is_refused_with_a_note_and_the_leads_goes_through(
    crew: Crew, fleet_factory: Any
) -> None:
    eli = [
        {
            "match": "tell dana",
            "from": "human",
            "calls": [{"tool": "directive", "arguments": {"to": "dana", "task": "ship it"}}],
            "reply": None,
        },
        {
            "match": "Directive for @eli",
            "from": "bot",
            "calls": [{"tool": "report", "arguments": {"status": "working", "text": "the parser"}}],
            "reply": "On it, dana.",
        },
    ]
    dana = [
        {
            "match": "assign",
            "from": "human",
            "calls": [{"tool": "directive", "arguments": {"to": "eli", "task": "write the parser"}}],
            "reply": None,
        }
    ]
    await start(
        crew,
        fleet_factory,
        kind="chain",
        lead="dana",
        **team.rules_env(crew.tmp, "eli", eli),
        **team.rules_env(crew.tmp, "dana", dana),
    )
    refused = await crew.ask(f"{crew.mention('eli')} tell dana to ship")
    await crew.emu.wait_for(lambda: team.thread_texts(crew.emu, crew.channel, refused), timeout=15)
    assert team.thread_texts(crew.emu, crew.channel, refused) == [
        "⛔ The room refused a directive from eli: in this chain room only the lead, dana, gives directives."
    ]
    (error,) = crew.sql(
        "SELECT s.error FROM turn_steps s JOIN turns t ON t.id = s.turn_id WHERE t.instance = 'eli'"
    )
    assert error[0].startswith("refused by the room: only the lead (dana) gives directives here")

    ask = await crew.ask(f"{crew.mention('dana')} assign the parser to eli")
    await crew.emu.wait_for(lambda: len(team.thread(crew.emu, crew.channel, ask)) == 2, timeout=15)
    directive, answer = team.thread(crew.emu, crew.channel, ask)
    assert directive["text"] == f"📌 Directive for {crew.mention('eli')}: write the parser"
    assert directive["bot_id"] == crew.apps["dana"].bot_id
    assert (answer["text"], answer["bot_id"]) == ("On it, dana.", crew.apps["eli"].bot_id)
    # The worker's report answers the directive: the task is on the board.
    assert crew.sql("SELECT request_ts, instance, status FROM tasks") == [(directive["ts"], "eli", "working")]


async def test_directives_are_refused_in_a_round_room(crew: Crew, fleet_factory: Any) -> None:
    dana = [
        {
            "match": "assign",
            "from": "human",
            "calls": [{"tool": "directive", "arguments": {"to": "eli", "task": "x"}}],
        }
    ]
    await start(crew, fleet_factory, kind="round", **team.rules_env(crew.tmp, "dana", dana))
    ask = await crew.ask(f"{crew.mention('dana')} assign something")
    await crew.emu.wait_for(lambda: team.thread_texts(crew.emu, crew.channel, ask, "⛔"), timeout=15)
    assert team.thread_texts(crew.emu, crew.channel, ask, "⛔") == [
        "⛔ The room refused a directive from dana: in a round room nobody gives orders."
    ]
