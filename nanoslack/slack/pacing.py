"""Posting pace per channel (docs/agents.md: replies are paced per channel).

Slack accepts about one message per second per channel, with short bursts; past that
it answers 429. A token bucket per channel keeps an instance under it instead of
relying on the 429s: ``burst`` posts go out at once, then one every ``1 / rate`` s.
"""

from __future__ import annotations

import time
from collections.abc import Callable

DEFAULT_RATE = 1.0  # posts per second per channel
DEFAULT_BURST = 3


class ChannelPacer:
    def __init__(
        self,
        rate: float = DEFAULT_RATE,
        burst: int = DEFAULT_BURST,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate = rate
        self.burst = max(1, burst)
        self._clock = clock
        # channel → (tokens left, when counted)
        self._buckets: dict[str, tuple[float, float]] = {}

    def reserve(self, channel: str) -> float:
        """Take a slot for one post to ``channel``: seconds to wait before sending it
        (0 when it may go now). ``rate`` 0 means no pacing."""
        if self.rate <= 0:
            return 0.0
        now = self._clock()
        tokens, at = self._buckets.get(channel, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate) - 1.0
        self._buckets[channel] = (tokens, now)
        return 0.0 if tokens >= 0 else -tokens / self.rate
