"""``quick_init`` (``nanoslack/frozen.py``): the cheaper ``__init__`` of the per-message value
types must build exactly what the dataclass's own ``__init__`` builds, and stay frozen."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from nanoslack.frozen import quick_init
from nanoslack.inbound import Inbound


def _twin(cls: type[Any]) -> type[Any]:
    """The same fields as a dataclass left with its own generated ``__init__``."""
    fields = [(f.name, f.type, f) for f in dataclasses.fields(cls)]
    specs = [
        (n, t, field(default=f.default)) if f.default is not dataclasses.MISSING else (n, t)
        for n, t, f in fields
    ]
    return dataclasses.make_dataclass(cls.__name__, specs, frozen=True, slots=True)


def _values(obj: object) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}  # type: ignore[arg-type]


def test_an_inbound_built_by_quick_init_holds_what_the_dataclass_init_would_set() -> None:
    plain = _twin(Inbound)
    positional = (
        "dana",
        "T0",
        "C0ROOM",
        "mpim",
        "1.000001",
        None,
        "U0ME",
        None,
        "hi",
        ("U0DANA",),
        "message",
    )
    assert _values(Inbound(*positional)) == _values(plain(*positional))
    keywords: dict[str, Any] = dict(
        zip([f.name for f in dataclasses.fields(Inbound)], positional, strict=False)
    )
    assert _values(Inbound(**keywords, hop=2, notice=True)) == _values(plain(**keywords, hop=2, notice=True))
    assert inspect.signature(Inbound).parameters.keys() == inspect.signature(plain).parameters.keys()


def test_a_quick_init_value_stays_frozen_comparable_hashable_and_replaceable() -> None:
    msg = Inbound("dana", "T0", "C0ROOM", "mpim", "1.000001", None, "U0ME", None, "hi", (), "message")
    same = Inbound("dana", "T0", "C0ROOM", "mpim", "1.000001", None, "U0ME", None, "hi", (), "message")
    assert msg == same and hash(msg) == hash(same)
    with pytest.raises(dataclasses.FrozenInstanceError):
        msg.text = "changed"  # type: ignore[misc]
    moved = dataclasses.replace(msg, sender_id="slack:bot:B0", hop=1)
    assert (moved.sender_id, moved.hop, moved.text) == ("slack:bot:B0", 1, "hi")
    with pytest.raises(TypeError):
        Inbound("dana")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Inbound(*([None] * (len(dataclasses.fields(Inbound)) + 1)))  # type: ignore[arg-type]


def _unfrozen() -> type[Any]:
    @dataclass(slots=True)
    class Loose:
        a: int

    return Loose


def _factory() -> type[Any]:
    @dataclass(frozen=True, slots=True)
    class WithFactory:
        a: list[int] = field(default_factory=list)

    return WithFactory


def _post_init() -> type[Any]:
    @dataclass(frozen=True, slots=True)
    class WithPostInit:
        a: int

        def __post_init__(self) -> None:
            pass

    return WithPostInit


@pytest.mark.parametrize("make", [_unfrozen, _factory, _post_init])
def test_a_class_quick_init_cannot_build_the_same_way_is_refused(make: Callable[[], type[Any]]) -> None:
    with pytest.raises(TypeError, match="quick_init"):
        quick_init(make())
