"""The fleet's numbers (docs/operations.md), counted where they happen.

Counting must not slow the envelope pump, so nothing here takes a lock or builds a
label set on the hot path: each instance has a ``Tally`` of plain integers that the
pump, the core and the poster bump (one event loop, so no races), and a
prometheus-client collector turns them into metric families only when ``/metrics``
is scraped. What is a state rather than a count (connected sockets, leases, the
backlog) is read at scrape time from the fleet (``FleetState``).

Every name starts with ``nanoslack_`` (docs/operations.md lists them).
"""

from __future__ import annotations

import bisect
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

# Seconds from an envelope's arrival on the socket to its ack: the target is 50 ms at p99.
ACK_BUCKETS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


class Histogram:
    """Counts per bucket, without prometheus-client's lock: one bisect per value."""

    __slots__ = ("bounds", "counts", "total", "count")

    def __init__(self, bounds: tuple[float, ...] = ACK_BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += n
            out.append(("+Inf" if bound == float("inf") else repr(bound), running))
        return out


class Tally:
    """One instance's counts. Attributes are bumped directly on the hot path."""

    __slots__ = (
        "received",
        "acked",
        "ack_latency",
        "turns",
        "tokens",
        "cached_tokens",
        "cost_usd",
        "hop_drops",
        "posts",
        "api_errors",
        "routine_runs",
        "feedback",
        "inbox_commits",
        "inbox_records",
    )

    def __init__(self) -> None:
        self.received = 0
        self.acked = 0
        self.ack_latency = Histogram()
        self.turns: Counter[str] = Counter()
        self.tokens = 0
        self.cached_tokens = 0
        self.cost_usd = 0.0
        self.hop_drops: Counter[str] = Counter()
        self.posts: Counter[str] = Counter()
        self.api_errors: Counter[tuple[str, str]] = Counter()
        # (routine, status) → due times that ended so (docs/routines.md).
        self.routine_runs: Counter[tuple[str, str]] = Counter()
        # People's 👍 / 👎 on replies, by value (docs/agent-surface.md "Feedback").
        self.feedback: Counter[str] = Counter()
        # The inbox's group commits and the messages they recorded (the benchmark's
        # measure of batching; not exported).
        self.inbox_commits = 0
        self.inbox_records = 0

    # -- the edge ---------------------------------------------------------------------------

    def acks(self, arrivals: Iterable[float]) -> None:
        """Envelopes acked now, given when each arrived (``time.monotonic``). The
        histogram's ``observe``, inlined: this runs for every envelope."""
        now = time.monotonic()
        hist = self.ack_latency
        counts, bounds = hist.counts, hist.bounds
        total, n = 0.0, 0
        for arrived in arrivals:
            waited = now - arrived
            counts[bisect.bisect_left(bounds, waited)] += 1
            total += waited
            n += 1
        hist.total += total
        hist.count += n
        self.acked += n

    def api_error(self, method: str, error: str) -> None:
        self.api_errors[(method, error)] += 1

    def post(self, result: str) -> None:
        self.posts[result] += 1

    # -- the core ---------------------------------------------------------------------------

    def turn(self, status: str, tokens: int = 0, cached_tokens: int = 0, cost_usd: float = 0.0) -> None:
        self.turns[status] += 1
        self.tokens += tokens
        self.cached_tokens += cached_tokens
        self.cost_usd += cost_usd

    def routine_run(self, routine: str, status: str) -> None:
        self.routine_runs[(routine, status)] += 1

    def hop_drop(self, reason: str) -> None:
        self.hop_drops[reason] += 1


@dataclass(frozen=True)
class FleetState:
    """What the fleet is, as of one scrape (read by ``Fleet.state``)."""

    # Every instance this process holds the lease of: socket connected or not.
    connected: Mapping[str, bool] = field(default_factory=dict)
    # Recorded messages not processed yet, per instance.
    backlog: Mapping[str, int] = field(default_factory=dict)
    leases: tuple[str, ...] = ()


class FleetMetrics:
    """The tallies of one fleet and the registry ``/metrics`` serves them from.

    A registry per fleet, not prometheus-client's global one: tests and the demo
    run several fleets in one process."""

    def __init__(self) -> None:
        self._tallies: dict[str, Tally] = {}
        self.state = FleetState()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))
        ProcessCollector(registry=self.registry)

    def tally(self, instance: str) -> Tally:
        """The instance's tally; the same one again when the instance is reconnected
        (a lease taken back), so its counters only ever go up."""
        found = self._tallies.get(instance)
        if found is None:
            found = self._tallies[instance] = Tally()
        return found

    @property
    def tallies(self) -> Mapping[str, Tally]:
        return self._tallies


def _counter(
    name: str, doc: str, labels: list[str], rows: Iterable[tuple[list[str], float]]
) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=labels)
    for values, value in rows:
        family.add_metric(values, value)
    return family


def _gauge(
    name: str, doc: str, labels: list[str], rows: Iterable[tuple[list[str], float]]
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=labels)
    for values, value in rows:
        family.add_metric(values, value)
    return family


class _Collector(Collector):
    def __init__(self, metrics: FleetMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        tallies = sorted(self._metrics.tallies.items())
        state = self._metrics.state
        yield from _counts(tallies)
        latency = HistogramMetricFamily(
            "nanoslack_ack_latency_seconds",
            "Seconds from an envelope's arrival on the socket to its ack (message events).",
            labels=["instance"],
        )
        for name, t in tallies:
            latency.add_metric([name], t.ack_latency.cumulative(), t.ack_latency.total)
        yield latency
        yield _gauge(
            "nanoslack_inbox_backlog",
            "Messages recorded and acked but not processed yet.",
            ["instance"],
            (([n], v) for n, v in sorted(state.backlog.items())),
        )
        yield _gauge(
            "nanoslack_instance_connected",
            "1 while the instance's Socket Mode connection is up (instances this process holds).",
            ["instance"],
            (([n], float(up)) for n, up in sorted(state.connected.items())),
        )
        yield _gauge(
            "nanoslack_instances_connected",
            "Instances of this process whose socket is connected.",
            [],
            [([], float(sum(state.connected.values())))],
        )
        yield _gauge(
            "nanoslack_leases_held",
            "Instance leases this process holds (docs/operations.md).",
            [],
            [([], float(len(state.leases)))],
        )


def _counts(tallies: list[tuple[str, Tally]]) -> Iterator[CounterMetricFamily]:
    def per(get: Callable[[Tally], float]) -> Iterator[tuple[list[str], float]]:
        return (([n], get(t)) for n, t in tallies)

    yield _counter(
        "nanoslack_envelopes_received",
        "Socket Mode envelopes read off the socket.",
        ["instance"],
        per(lambda t: t.received),
    )
    yield _counter(
        "nanoslack_envelopes_acked", "Socket Mode envelopes acked.", ["instance"], per(lambda t: t.acked)
    )
    yield _counter(
        "nanoslack_turns",
        "Agent turns ended, by status (done, silent, failed, budget, halted, abandoned).",
        ["instance", "status"],
        (([n, s], v) for n, t in tallies for s, v in sorted(t.turns.items())),
    )
    yield _counter(
        "nanoslack_agent_tokens",
        "Tokens the agent's turns used (LLM back ends).",
        ["instance"],
        per(lambda t: t.tokens),
    )
    yield _counter(
        "nanoslack_agent_cached_tokens",
        "Of the agent tokens, input read from the provider's prompt cache.",
        ["instance"],
        per(lambda t: t.cached_tokens),
    )
    yield _counter(
        "nanoslack_agent_cost_usd",
        "What the agent's model calls cost in US dollars (genai-prices; models it knows).",
        ["instance"],
        per(lambda t: t.cost_usd),
    )
    yield _counter(
        "nanoslack_hop_drops",
        "Bot messages the guard dropped, by reason.",
        ["instance", "reason"],
        (([n, r], v) for n, t in tallies for r, v in sorted(t.hop_drops.items())),
    )
    yield _counter(
        "nanoslack_posts",
        "Outbox posts by result (sent, failed, in_doubt, recovered, resent).",
        ["instance", "result"],
        (([n, r], v) for n, t in tallies for r, v in sorted(t.posts.items())),
    )
    yield _counter(
        "nanoslack_slack_api_errors",
        "Slack Web API calls answered with an error (429s included, each try).",
        ["instance", "method", "error"],
        (([n, m, e], v) for n, t in tallies for (m, e), v in sorted(t.api_errors.items())),
    )
    yield _counter(
        "nanoslack_routine_runs",
        "Routine due times, by how they ended (done, silent, failed, skipped, missed).",
        ["instance", "routine", "status"],
        (([n, r, s], v) for n, t in tallies for (r, s), v in sorted(t.routine_runs.items())),
    )
    yield _counter(
        "nanoslack_feedback",
        "People's feedback-button clicks on DM replies, by value (positive, negative).",
        ["instance", "value"],
        (([n, value], v) for n, t in tallies for value, v in sorted(t.feedback.items())),
    )
