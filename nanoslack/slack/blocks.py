"""Block Kit for the owners' questions (``nanoslack.asks``), and clicks back to answers.

An open ask is a section (the question, and its detail quoted under it) and one button
per choice; an answered one is the question with the verdict under it, no buttons.
A button's ``action_id`` is ``nanoslack_<choice>`` (``nanoslack_approve``,
``nanoslack_resume``, ``nanoslack_budget_allow``, …) and its ``value`` the ask's ref,
so a click names both what was chosen and what it was about.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nanoslack.asks import KINDS, Answer, Choice, kind_of_choice
from nanoslack.store import AskRow

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
