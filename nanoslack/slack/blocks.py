"""Block Kit for the owners' questions (``nanoslack.asks``) and a room's votes
(``nanoslack.team``), and clicks back to answers and ballots.

An open ask is a section (the question, and its detail quoted under it) and one button
per choice; an answered one is the question with the verdict under it, no buttons.
A button's ``action_id`` is ``nanoslack_<choice>`` (``nanoslack_approve``,
``nanoslack_resume``, ``nanoslack_budget_allow``, …) and its ``value`` the ask's ref,
so a click names both what was chosen and what it was about.

A vote is its question and one button per option (``nanoslack_vote_<i>``, value
``<vote id>:<i>``), any person in the room may click; once closed, the question with
its result under it, no buttons.

A DM reply ends with Slack's feedback buttons (docs/agent-surface.md, "Feedback"): a
``context_actions`` block with one ``feedback_buttons`` element (``nanoslack_feedback``),
each button's value ``positive:<turn id>`` or ``negative:<turn id>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nanoslack.asks import KINDS, Answer, Choice, kind_of_choice
from nanoslack.inbound import FeatureClick, FeedbackClick
from nanoslack.store import AskRow, VoteRow
from nanoslack.team.votes import question_text

ACTION_PREFIX = "nanoslack_"

Block = dict[str, Any]


def action_id(choice: str) -> str:
    return ACTION_PREFIX + choice


def choice_of(action: str) -> str | None:
    """The choice a button's ``action_id`` names, or None for a button not ours."""
    choice = action.removeprefix(ACTION_PREFIX)
    return choice if choice != action and kind_of_choice(choice) is not None else None


def ask_blocks(ask: AskRow) -> list[Block]:
    if not ask.is_open:
        return [_section(ask.question), {"type": "context", "elements": [_mrkdwn(ask.verdict or "")]}]
    kind = KINDS.get(ask.kind)
    text = f"{ask.question}\n{ask.detail}" if ask.detail else ask.question
    if kind is None:
        return [_section(text)]
    return [
        _section(text),
        {
            "type": "actions",
            "block_id": f"{ACTION_PREFIX}{ask.kind}_{ask.id}",
            "elements": [_button(choice, ask.ref) for choice in kind.choices],
        },
    ]


def answers_of(body: Mapping[str, Any]) -> list[Answer]:
    """The owner answers a ``block_actions`` payload carries (ours only; malformed
    actions are left out)."""
    user = (body.get("user") or {}).get("id")
    if not isinstance(user, str):
        return []
    found = []
    for action in body.get("actions") or []:
        if not isinstance(action, Mapping):
            continue
        choice = choice_of(str(action.get("action_id") or ""))
        value = action.get("value")
        if choice is not None and isinstance(value, str):
            found.append(Answer(choice=choice, ref=value, by_user=user))
    return found


VOTE_ACTION_PREFIX = f"{ACTION_PREFIX}vote_"
VOTE_HINT = "Click your answer (clicking again changes it); bots answer with ballot."


def vote_blocks(vote: VoteRow) -> list[Block]:
    question = question_text(vote.instance, vote.question, vote.options)
    if not vote.is_open:
        return [_section(question), {"type": "context", "elements": [_mrkdwn(vote.result or "Closed.")]}]
    buttons = [
        {
            "type": "button",
            "action_id": f"{VOTE_ACTION_PREFIX}{i}",
            "text": {"type": "plain_text", "text": option},
            "value": f"{vote.id}:{i}",
        }
        for i, option in enumerate(vote.options)
    ]
    return [
        _section(question),
        {"type": "actions", "block_id": f"{VOTE_ACTION_PREFIX}{vote.id}", "elements": buttons},
        {"type": "context", "elements": [_mrkdwn(VOTE_HINT)]},
    ]


def vote_clicks_of(body: Mapping[str, Any]) -> list[FeatureClick]:
    """The ballots a ``block_actions`` payload carries (clicks on a vote's buttons)."""
    user = (body.get("user") or {}).get("id")
    if not isinstance(user, str):
        return []
    found = []
    for action in body.get("actions") or []:
        if not isinstance(action, Mapping):
            continue
        if not str(action.get("action_id") or "").startswith(VOTE_ACTION_PREFIX):
            continue
        vote, _, option = str(action.get("value") or "").partition(":")
        if vote.isdigit() and option.isdigit():
            found.append(FeatureClick(item=int(vote), option=int(option), by_user=user))
    return found


FEEDBACK_ACTION = f"{ACTION_PREFIX}feedback"


def feedback_blocks(turn_id: int) -> list[Block]:
    """Slack's 👍 / 👎 under a turn's reply."""
    return [
        {
            "type": "context_actions",
            "block_id": f"{ACTION_PREFIX}feedback_{turn_id}",
            "elements": [
                {
                    "type": "feedback_buttons",
                    "action_id": FEEDBACK_ACTION,
                    "positive_button": {
                        "text": {"type": "plain_text", "text": "👍"},
                        "value": f"positive:{turn_id}",
                        "accessibility_label": "Good answer",
                    },
                    "negative_button": {
                        "text": {"type": "plain_text", "text": "👎"},
                        "value": f"negative:{turn_id}",
                        "accessibility_label": "Bad answer",
                    },
                }
            ],
        }
    ]


def feedback_clicks_of(body: Mapping[str, Any]) -> list[FeedbackClick]:
    """The 👍 / 👎 clicks a ``block_actions`` payload carries (on our feedback buttons)."""
    user = (body.get("user") or {}).get("id")
    if not isinstance(user, str):
        return []
    found = []
    for action in body.get("actions") or []:
        if not isinstance(action, Mapping) or action.get("type") != "feedback_buttons":
            continue
        if action.get("action_id") != FEEDBACK_ACTION:
            continue
        value, _, turn = str(action.get("value") or "").partition(":")
        if value in ("positive", "negative") and turn.isdigit():
            found.append(FeedbackClick(turn_id=int(turn), value=value, by_user=user))
    return found


def _button(choice: Choice, value: str) -> Block:
    button: Block = {
        "type": "button",
        "action_id": action_id(choice.id),
        "text": {"type": "plain_text", "text": choice.label},
        "value": value,
    }
    if choice.style:
        button["style"] = choice.style
    return button


def _section(text: str) -> Block:
    return {"type": "section", "text": _mrkdwn(text)}


def _mrkdwn(text: str) -> Block:
    return {"type": "mrkdwn", "text": text}
