"""Teammates: SOUL.md + AGENTS.md + shared skills → the system prompt (docs/agents.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nanoslack.agents import load_teammate
from nanoslack.agents.teammates import Mate, Roster, skill_problems, split_front_matter

REPO_TEAMMATES = Path(__file__).resolve().parents[2] / "teammates"


@pytest.fixture
def crew(tmp_path: Path) -> Path:
    (tmp_path / "dana").mkdir()
    (tmp_path / "dana" / "SOUL.md").write_text(
        '---\nrole: planner\nemoji: "🧭"\n---\nYou are Dana, the planner.\n', encoding="utf-8"
    )
    (tmp_path / "dana" / "AGENTS.md").write_text("Hand work over with @name.\n", encoding="utf-8")
    skills = tmp_path / "_skills"
    skills.mkdir()
    (skills / "review.md").write_text("\n# Review: look for failure paths\n\nDetails.\n", encoding="utf-8")
    (skills / "handoff.md").write_text("Handoff: one @name, one ask\n", encoding="utf-8")
    return tmp_path


def test_front_matter_gives_role_and_emoji_and_stays_out_of_the_persona(crew: Path) -> None:
    mate = load_teammate(crew, "dana")

    assert (mate.role, mate.emoji) == ("planner", "🧭")
    assert mate.soul == "You are Dana, the planner."
    assert not mate.is_default
    assert mate.folder == crew / "dana"


def test_system_prompt_is_persona_first_then_agents_md_then_skills(crew: Path) -> None:
    prompt = load_teammate(crew, "dana").system_prompt(crew / "_skills")

    assert prompt.startswith("You are Dana, the planner.")
    assert prompt.index("Dana, the planner") < prompt.index("Hand work over") < prompt.index("Skills")
    assert "role:" not in prompt


def test_skills_are_listed_by_name_and_first_non_empty_line(crew: Path) -> None:
    prompt = load_teammate(crew, "dana").system_prompt(crew / "_skills")

    assert prompt.endswith(
        "Skills you can use:\n"
        "- handoff: Handoff: one @name, one ask\n"
        "- review: Review: look for failure paths\n"
        "Read a skill's full text with the read_skill tool before you use it."
    )
    assert "Details." not in prompt


def test_a_skill_with_front_matter_is_listed_by_its_description(crew: Path) -> None:
    (crew / "_skills" / "handoff.md").write_text(
        "---\nname: handoff\ndescription: How to hand work to a teammate: one ask each\n---\n"
        "# Handoff\n\nDetails.\n",
        encoding="utf-8",
    )
    prompt = load_teammate(crew, "dana").system_prompt(crew / "_skills")
    assert "- handoff: How to hand work to a teammate: one ask each\n" in prompt
    assert "---" not in prompt and skill_problems(crew / "_skills") == ()


def test_a_skills_front_matter_that_does_not_parse_is_a_problem_with_its_file_and_line(crew: Path) -> None:
    path = crew / "_skills" / "review.md"
    path.write_text("---\nname: review\nthis line is no key\n---\n# Review\n", encoding="utf-8")
    (problem,) = skill_problems(crew / "_skills")
    assert (problem.file, problem.line) == (str(path), 3)
    assert "- review: Review\n" in load_teammate(crew, "dana").system_prompt(crew / "_skills")


def test_skills_are_read_fresh_on_every_prompt(crew: Path) -> None:
    mate = load_teammate(crew, "dana")
    skills = crew / "_skills"
    mate.system_prompt(skills)

    (skills / "review.md").write_text("Review: now check naming too\n", encoding="utf-8")
    (skills / "deploy.md").write_text("Deploy: ship on Tuesdays\n", encoding="utf-8")
    os.utime(skills / "review.md")
    prompt = mate.system_prompt(skills)

    assert "- review: Review: now check naming too" in prompt
    assert "- deploy: Deploy: ship on Tuesdays" in prompt
    assert "failure paths" not in prompt


def test_instance_without_folder_gets_a_default_persona(crew: Path) -> None:
    mate = load_teammate(crew, "gus")

    assert mate.is_default
    assert mate.folder is None
    assert mate.system_prompt(crew / "_skills").startswith("You are gus, a helpful teammate")


def test_no_skills_folder_means_no_skills_section(crew: Path) -> None:
    prompt = load_teammate(crew, "dana").system_prompt(crew / "missing")

    assert "Skills" not in prompt


def test_soul_without_front_matter_is_all_persona(tmp_path: Path) -> None:
    (tmp_path / "eli").mkdir()
    (tmp_path / "eli" / "SOUL.md").write_text("You are Eli.\nrole: not front matter\n", encoding="utf-8")

    mate = load_teammate(tmp_path, "eli")

    assert mate.role == ""
    assert mate.soul == "You are Eli.\nrole: not front matter"
    assert mate.agents_md == ""


def test_an_unclosed_front_matter_is_a_problem_and_left_out_of_the_persona(tmp_path: Path) -> None:
    (tmp_path / "dana").mkdir()
    (tmp_path / "dana" / "SOUL.md").write_text("---\nrole: planner\nemoji: x\n\nYou are Dana.\nYou plan.\n")
    mate = load_teammate(tmp_path, "dana")
    assert mate.soul == "You are Dana.\nYou plan."  # no ---, no role: line
    assert (mate.role, mate.emoji) == ("", "")
    [problem] = mate.problems
    assert (problem.file, problem.line) == (str(tmp_path / "dana" / "SOUL.md"), 1)
    assert "never closed" in problem.what
    assert split_front_matter("---\nrole: x\nbody") == ({}, "body")


def test_a_prompts_list_left_open_is_a_problem_and_gives_no_prompts(tmp_path: Path) -> None:
    (tmp_path / "dana").mkdir()
    (tmp_path / "dana" / "SOUL.md").write_text('---\nrole: planner\nprompts: ["a", \n---\nYou are Dana.\n')
    mate = load_teammate(tmp_path, "dana")
    assert (mate.role, mate.prompts, mate.soul) == ("planner", (), "You are Dana.")
    [problem] = mate.problems
    assert problem.line == 3 and "prompts list is not closed" in problem.what


@pytest.mark.parametrize(
    ("instance", "role"), [("dana", "planner"), ("eli", "engineer"), ("fay", "reviewer")]
)
def test_sample_crew_has_distinct_roles_and_shared_skills(instance: str, role: str) -> None:
    mate = load_teammate(REPO_TEAMMATES, instance)
    prompt = mate.system_prompt(REPO_TEAMMATES / "_skills")

    assert (mate.role, mate.is_default) == (role, False)
    assert mate.emoji
    assert mate.agents_md
    assert "- handoff: Handoff:" in prompt
    assert "- review-checklist: Review checklist:" in prompt


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('prompts: ["Plan my day", "What is blocked?"]', ("Plan my day", "What is blocked?")),
        ("prompts: [Plan my day, What is blocked?]", ("Plan my day", "What is blocked?")),
        ('prompts: ["a", "b", "c", "d", "e"]', ("a", "b", "c", "d")),
        ("prompts: []", ()),
    ],
)
def test_front_matter_prompts_are_the_panes_suggested_prompts_at_most_four(
    tmp_path: Path, line: str, expected: tuple[str, ...]
) -> None:
    (tmp_path / "dana").mkdir()
    (tmp_path / "dana" / "SOUL.md").write_text(f"---\nrole: planner\n{line}\n---\nYou are Dana.\n")
    mate = load_teammate(tmp_path, "dana")
    assert mate.prompts == expected
    assert "prompts" not in mate.soul


@pytest.mark.parametrize(("value", "serial"), [("true", True), ("yes", True), ("false", False), ("", False)])
def test_front_matter_serial_says_one_turn_at_a_time(tmp_path: Path, value: str, serial: bool) -> None:
    (tmp_path / "dana").mkdir()
    (tmp_path / "dana" / "SOUL.md").write_text(
        f"---\nserial: {value}\n---\nYou are Dana.\n", encoding="utf-8"
    )
    mate = load_teammate(tmp_path, "dana")
    assert (mate.serial, mate.problems) == (serial, ())


def test_a_serial_value_that_is_no_yes_or_no_is_a_problem_and_not_serial(tmp_path: Path) -> None:
    (tmp_path / "dana").mkdir()
    (tmp_path / "dana" / "SOUL.md").write_text("---\nserial: maybe\n---\nYou are Dana.\n", encoding="utf-8")
    mate = load_teammate(tmp_path, "dana")
    assert not mate.serial
    assert [(p.line, p.what) for p in mate.problems] == [(2, "serial is true or false, not 'maybe'")]


def test_the_roster_gives_each_teammate_its_role_or_its_first_line_and_marks_who_is_here(
    tmp_path: Path,
) -> None:
    for name, soul in {
        "eli": "---\nrole: reviewer\n---\nYou are Eli.\n",
        "fay": "\n# Fay designs the screens\nMore.\n",
    }.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "SOUL.md").write_text(soul, encoding="utf-8")
    roster = Roster(tmp_path, ["eli", "fay", "gus"])  # gus: another process's, no folder here
    assert [m.line() for m in roster.mates(["alice", "Eli"])] == [
        "eli — reviewer (here)",
        "fay — Fay designs the screens",
        "gus",
    ]
    (tmp_path / "eli" / "SOUL.md").write_text("---\nrole: QA lead\n---\nYou are Eli.\n", encoding="utf-8")
    assert roster.mates([])[0] == Mate("eli", "QA lead", False)  # read again when edited
