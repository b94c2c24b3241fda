"""The fleet bench's charts (PNG, matplotlib, a dev dependency): the rounds, fleet beside
bare bolt, and the latency distributions. Each chart names its machine, date and command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from _common import percentile


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def _footer(fig: Any, caption: str) -> None:
    fig.text(0.01, 0.01, caption, fontsize=7, color="#555555", ha="left", va="bottom", wrap=True)


def rounds_chart(result: dict[str, Any], path: Path, caption: str) -> Path:
    """Acks/s per round, bare bolt and the fleet side by side, the ratio above each pair."""
    plt = _pyplot()
    rounds = result["rounds"]
    xs = list(range(1, len(rounds) + 1))
    bare = [r["bare_acks_per_s"] for r in rounds]
    fleet = [r["fleet_acks_per_s"] for r in rounds]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.38
    ax.bar([x - width / 2 for x in xs], bare, width, label="bare bolt", color="#9aa5b1")
    ax.bar([x + width / 2 for x in xs], fleet, width, label="nanoslack fleet", color="#2f6fdf")
    for x, r, f in zip(xs, rounds, fleet, strict=True):
        ax.annotate(f"{r['ratio_acks']:.2f}×", (x + width / 2, f), ha="center", va="bottom", fontsize=9)
    ax.set_xticks(xs, [f"round {x}" for x in xs])
    ax.set_ylabel("envelopes acked per second")
    ax.set_title(
        f"{result['apps']} instances, {result['messages']:,} messages ({result['envelopes']:,} envelopes)"
        f" per round: median {result['ratio_acks']:.2f}× bare bolt"
    )
    ax.set_ylim(0, max(bare + fleet) * 1.25)  # room for the legend above the bars
    ax.legend(loc="upper left", ncol=2)
    ax.grid(axis="y", alpha=0.3)
    fig.subplots_adjust(bottom=0.18)
    _footer(fig, caption)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def latency_chart(samples: dict[str, list[float]], path: Path, caption: str) -> Path:
    """The distribution (CDF, log scale) of each phase's latencies in ms."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, ms in samples.items():
        if not ms:
            continue
        values = sorted(ms)
        n = len(values)
        ys = [(i + 1) / n * 100 for i in range(n)]
        p99 = percentile(values, 99)  # as the bench reports it
        ax.plot(values, ys, label=f"{label} (p99 {p99:.1f} ms, n={n:,})")
    ax.set_xscale("log")
    ax.set_xlabel("ms (log scale)")
    ax.set_ylabel("% of envelopes / replies at or below")
    ax.axhline(99, color="#cc4444", linewidth=0.8, linestyle=":")
    ax.axvline(50, color="#cc4444", linewidth=0.8, linestyle=":")
    ax.set_title("Ack latency (send → ack) and reply latency (post → first reply)")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.subplots_adjust(bottom=0.18)
    _footer(fig, caption)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
