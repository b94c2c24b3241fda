"""Slack's checks on a message's ``blocks`` (``chat.postMessage``, ``chat.update``,
``chat.stopStream``), for the blocks an agent's message carries (docs/emulator.md):

- at most 50 blocks, each an object with a ``type``; a ``block_id`` at most 255 characters;
- ``markdown``: ``text`` standard Markdown, at most 12,000 characters summed over the
  message's markdown blocks; its ``block_id`` is ignored and not kept (Slack's reference);
- ``context_actions``: 1 to 5 elements, each ``feedback_buttons`` (a ``positive_button`` and a
  ``negative_button``, each with ``plain_text`` ``text`` and a ``value``) or ``icon_button``.

Other block types pass as sent. A message that breaks one of these is ``invalid_blocks``.
"""

from __future__ import annotations

from typing import Any

from .state import EmulatorError

JSON = dict[str, Any]

MAX_BLOCKS = 50
BLOCK_ID_MAX = 255
ACTION_ID_MAX = 255
MARKDOWN_BLOCKS_MAX_CHARS = 12_000
CONTEXT_ACTIONS_MAX = 5
BUTTON_VALUE_MAX = 2_000
CONTEXT_ACTION_ELEMENTS = frozenset({"feedback_buttons", "icon_button"})


def checked_blocks(blocks: Any) -> list[JSON] | None:
    """The blocks as the message keeps them; ``invalid_blocks`` when Slack would refuse them."""
    if blocks is None:
        return None
    if not isinstance(blocks, list) or len(blocks) > MAX_BLOCKS:
        raise EmulatorError("invalid_blocks")
    kept = [_checked(block) for block in blocks]
    markdown = sum(len(b["text"]) for b in kept if b["type"] == "markdown")
    if markdown > MARKDOWN_BLOCKS_MAX_CHARS:
        raise EmulatorError("invalid_blocks")
    return kept


def _checked(block: Any) -> JSON:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise EmulatorError("invalid_blocks")
    if not _short(block.get("block_id"), BLOCK_ID_MAX):
        raise EmulatorError("invalid_blocks")
    if block["type"] == "markdown":
        text = block.get("text")
        if not isinstance(text, str) or not text:
            raise EmulatorError("invalid_blocks")
        return {"type": "markdown", "text": text}
    if block["type"] == "context_actions":
        elements = block.get("elements")
        if not isinstance(elements, list) or not 1 <= len(elements) <= CONTEXT_ACTIONS_MAX:
            raise EmulatorError("invalid_blocks")
        if not all(_context_action(el) for el in elements):
            raise EmulatorError("invalid_blocks")
    return block


def _context_action(element: Any) -> bool:
    if not isinstance(element, dict) or element.get("type") not in CONTEXT_ACTION_ELEMENTS:
        return False
    if not _short(element.get("action_id"), ACTION_ID_MAX):
        return False
    if element["type"] != "feedback_buttons":
        return True
    return all(_feedback_button(element.get(side)) for side in ("positive_button", "negative_button"))


def _feedback_button(button: Any) -> bool:
    if not isinstance(button, dict):
        return False
    text = button.get("text")
    if not isinstance(text, dict) or text.get("type") != "plain_text" or not text.get("text"):
        return False
    value = button.get("value")
    return isinstance(value, str) and bool(value) and len(value) <= BUTTON_VALUE_MAX


def _short(value: Any, limit: int) -> bool:
    """An optional id: absent, or a string of at most ``limit`` characters."""
    return value is None or (isinstance(value, str) and len(value) <= limit)
