from __future__ import annotations

import dataclasses
import json

import pytest

from nanoslack.inbound import PAYLOAD_FIELDS, Inbound
from tests.factories import inbound


def sample() -> Inbound:
    """Every field set, none to its default."""
    return inbound(
        instance="dana", team_id="T0", channel="C0ROOM", channel_type="mpim", ts="1700000000.000100",
        thread_ts="1700000000.000001", user="U0ELIBOT", bot_id="B0ELI", text="<@U0DANA> hi ✓",
        mentions=("U0DANA",), event_type="message", subtype=None, event_id="Ev1",
        sender_id="slack:bot:B0ELI", bot_name="eli", hop=2, hop_limit=6,
    )  # fmt: skip


def test_inbox_payload_round_trips_every_field() -> None:
    msg = sample()
    assert Inbound.from_payload(msg.to_payload()) == msg


def test_payload_layout_names_every_field_once() -> None:
    names = [f.name for f in dataclasses.fields(Inbound)]
    assert sorted(PAYLOAD_FIELDS) == sorted(names)


def test_an_object_payload_from_an_earlier_build_still_resumes() -> None:
    msg = sample()
    old = json.dumps({**dataclasses.asdict(msg), "mentions": list(msg.mentions), "gone": 1})
    assert Inbound.from_payload(old) == msg


def test_an_unknown_payload_version_is_refused_not_misread() -> None:
    with pytest.raises(ValueError, match="unknown inbox payload format"):
        Inbound.from_payload(json.dumps([99, "dana"]))
