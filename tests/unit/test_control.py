"""Room control's text rules: acknowledgements and owner commands."""

from __future__ import annotations

import pytest

from nanoslack.control import command_of, is_acknowledgement


@pytest.mark.parametrize(
    "text",
    [
        "thanks!",
        "Thank you.",
        "OK",
        "okay",
        "Got it!",
        "Acknowledged.",
        "noted",
        "👍",
        ":+1:",
        "*(silent)*",
        "(silent)",
        "NO_REPLY",
        "[silence]",
        "<@U0DANA> thanks! :pray:",
        "Ok, thanks — got it.",
    ],
)
def test_acknowledgements_and_silence_markers_are_recognised(text: str) -> None:
    assert is_acknowledgement(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "thanks, but the build is still red",
        "ok so what next?",
        "<@U0DANA> can you check the build?",
        "not ok",
        "stop",
    ],
)
def test_messages_that_say_something_are_not_acknowledgements(text: str) -> None:
    assert not is_acknowledgement(text)


@pytest.mark.parametrize(
    ("text", "command"),
    [
        ("stop", "halt"),
        ("STOP!", "halt"),
        ("<@U0DANA> <@U0ELI> halt", "halt"),
        ("Resume.", "resume"),
        ("please stop", None),
        ("stop the build", None),
        ("thanks", None),
    ],
)
def test_only_a_bare_stop_halt_or_resume_is_a_command(text: str, command: str | None) -> None:
    assert command_of(text) == command
