from __future__ import annotations

from nanoslack.slack.pacing import ChannelPacer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_goes_out_at_once_then_one_post_a_second_per_channel() -> None:
    clock = Clock()
    pacer = ChannelPacer(rate=1.0, burst=3, clock=clock)
    assert [pacer.reserve("C1") for _ in range(5)] == [0.0, 0.0, 0.0, 1.0, 2.0]
    assert pacer.reserve("C2") == 0.0  # another channel has its own budget


def test_the_bucket_refills_with_time_but_never_past_the_burst() -> None:
    clock = Clock()
    pacer = ChannelPacer(rate=1.0, burst=2, clock=clock)
    assert [pacer.reserve("C1") for _ in range(2)] == [0.0, 0.0]
    clock.now += 1.0
    assert pacer.reserve("C1") == 0.0
    clock.now += 60.0
    assert [pacer.reserve("C1") for _ in range(3)] == [0.0, 0.0, 1.0]


def test_rate_zero_never_waits() -> None:
    pacer = ChannelPacer(rate=0.0)
    assert {pacer.reserve("C1") for _ in range(100)} == {0.0}
