"""Files in (docs/agents.md "Files"): downloads never slow the acks, and they stay bounded.

1. Acks with and without files. The emulator in a subprocess, 10 apps in one MPIM with a
   human, the nanoslack ``Fleet`` in this process with a silent script agent (every mention
   is a turn, and a turn that answers a file downloads it, but posts nothing). A burst
   of N human messages in one driver call, each mentioning one app round-robin; in the
   ``files`` run one message in ten is a ``file_share`` carrying a distinct 200 KB text file
   (the emulator makes it), in the ``plain`` run the same message without the file.
   Measured: envelopes acked per second over the burst and the
   emulator's send → ack latencies (p50, p99). Runs alternate (plain, files, plain, …) on a
   fresh emulator and fleet each; the figures are the medians, and the ratio files / plain.
2. A burst of file messages. 500 ``file_share`` messages at once, each a distinct file
   (200 KB by default), mentioning the apps round-robin, with ``NANOSLACK_MAX_TURNS=64`` so
   that more turns want a file at once than the fetcher allows. Measured from the fetcher's
   own counters: the most downloads at once (bound: ``NANOSLACK_FILE_FETCHES``, default 4)
   and the most file bytes held in memory at once (bound: 50 MB); files downloaded, failed;
   the seconds until every file was fetched.

Prints one JSON object (all figures and the targets) and a short summary.

    .venv/bin/python bench/files_bench.py [--messages 1000] [--rounds 3] [--file-kb 200]
        [--burst 500] [--burst-kb 200] [--skip-acks] [--skip-burst]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from typing import Any

from _common import drop_proxies, percentile, start_emulator, stop_process, wait_until
from fleet_bench import (
    N_APPS,
    WARMUP,
    Driver,
    _connections_at_least,
    acked_at_least,
    envelopes_for,
    replying_agent,
    silent_agent,
    unpaced_fleet_settings,
    workload,
)

from nanoslack import heap
from nanoslack.config.files import DEFAULT_FILE_FETCHES, DEFAULT_FILE_MEMORY_BYTES
from nanoslack.logs import configure_logging
from nanoslack.slack.fleet import Fleet

TARGET_ACK_RATIO = 0.95  # files / plain envelopes acked per second: within 5 %
TARGET_P99_RATIO = 1.05


def _content(i: int, size: int) -> str:
    line = f"row {i}," + "x" * 60 + "\n"
    return (line * (size // len(line) + 1))[:size]


async def _start(
    tmp: str, n_apps: int, *, replying: bool = True, **extra: str
) -> tuple[Any, dict[str, Any], Driver, Fleet]:
    proc, info = start_emulator(n_apps)
    drv = Driver(info["base_url"])
    agent = replying_agent(tmp) if replying else silent_agent(tmp)
    fleet = Fleet(unpaced_fleet_settings(tmp, info, agent, **extra))
    started = await fleet.start()
    assert len(started) == n_apps, started
    await wait_until(lambda: _connections_at_least(drv, n_apps), within=30, what="fleet connected")
    return proc, info, drv, fleet


async def _share(drv: Driver, user: str, room: str, text: str, name: str, content: str) -> None:
    await drv.post(
        "share_file",
        {"user_id": user, "channel": room, "name": name, "content": content, "text": text},
    )


async def ack_run(n_messages: int, file_bytes: int, *, files: bool, rate: float = 0.0) -> dict[str, Any]:
    """One burst on a fresh emulator and fleet: every tenth message a file share (or not).
    ``rate`` > 0: the messages come at that many a second instead (ten every tenth of a
    second), so the turns, and their downloads, run between the envelopes."""
    with tempfile.TemporaryDirectory(prefix="files-bench-") as tmp:
        # Silent turns: they run (and download) but post nothing, so every envelope acked is
        # one of the burst's (a reply would be fanned out as more envelopes).
        proc, info, drv, fleet = await _start(tmp, N_APPS, replying=False)
        restore = heap.settle()  # as Fleet.run does
        try:
            alice, room = info["users"][0]["id"], info["conversations"][0]["id"]
            await drv.bulk_post(alice, room, workload(info, WARMUP, word="warm"))
            await wait_until(acked_at_least(drv, envelopes_for(WARMUP, N_APPS)), within=60, what="warm-up")
            await drv.ack_latencies(clear=True)
            base = (await drv.stats())["acked"]
            fleet_acks0 = _fleet_acks(fleet)
            texts = workload(info, n_messages)
            fetcher = fleet._edge.files  # noqa: SLF001 — the bench reads the fetcher's counters
            extra = {"file_every": 10, "file_bytes": file_bytes} if files else {}
            t0 = time.perf_counter()
            post = asyncio.create_task(_post(drv, alice, room, texts, extra, rate))
            await wait_until(
                acked_at_least(drv, base + envelopes_for(n_messages, N_APPS)),
                within=300,
                interval=0.02,
                what="all envelopes acked",
            )
            wall = time.perf_counter() - t0
            await post
            latencies = sorted(x * 1000 for x in await drv.ack_latencies())
            count, total = (a - b for a, b in zip(_fleet_acks(fleet), fleet_acks0, strict=True))
            return {
                "files": files,
                "ack_seconds": round(wall, 3),
                "envelopes_acked_per_s": round(envelopes_for(n_messages, N_APPS) / wall),
                "ack_p50_ms": round(percentile(latencies, 50), 2),
                "ack_p99_ms": round(percentile(latencies, 99), 2),
                # The fleet's own view: an envelope's arrival on its socket → its ack.
                "fleet_ack_mean_ms": round(total / count * 1000, 3) if count else None,
                "files_fetched_by_then": fetcher.counters.downloaded if fetcher else 0,
                "files_fetched_in_all": await _all_fetched(fetcher, n_messages // 10 if files else 0),
            }
        finally:
            await fleet.stop()
            restore()
            await drv.close()
            stop_process(proc)


async def phase_acks(n_messages: int, rounds: int, file_bytes: int, rate: float = 0.0) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    for r in range(rounds):
        for files in (r % 2 == 1, r % 2 == 0):  # alternate which goes first
            runs.append(await ack_run(n_messages, file_bytes, files=files, rate=rate))
            print(json.dumps(runs[-1]), flush=True)

    def median(key: str, files: bool) -> float:
        return statistics.median(float(run[key]) for run in runs if run["files"] is files)

    plain_rate, files_rate = median("envelopes_acked_per_s", False), median("envelopes_acked_per_s", True)
    return {
        "messages": n_messages,
        "rate_per_s": rate or "burst",
        "file_kb": file_bytes // 1024,
        "rounds": rounds,
        "runs": runs,
        "plain_envelopes_acked_per_s": plain_rate,
        "files_envelopes_acked_per_s": files_rate,
        "ratio_acks_files_over_plain": round(files_rate / plain_rate, 3),
        "plain_ack_p50_ms": median("ack_p50_ms", False),
        "files_ack_p50_ms": median("ack_p50_ms", True),
        "plain_ack_p99_ms": median("ack_p99_ms", False),
        "files_ack_p99_ms": median("ack_p99_ms", True),
        "plain_fleet_ack_mean_ms": median("fleet_ack_mean_ms", False),
        "files_fleet_ack_mean_ms": median("fleet_ack_mean_ms", True),
    }


async def phase_burst(n_files: int, file_bytes: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="files-burst-") as tmp:
        proc, info, drv, fleet = await _start(tmp, N_APPS, NANOSLACK_MAX_TURNS="64")
        try:
            alice, room = info["users"][0]["id"], info["conversations"][0]["id"]
            fetcher = fleet._edge.files  # noqa: SLF001 — the bench reads the fetcher's counters
            assert fetcher is not None
            texts = workload(info, n_files, word="file")
            t0 = time.perf_counter()
            # Shared as fast as the emulator takes them: the turns pile up behind the fetcher.
            await asyncio.gather(
                *(
                    _share(drv, alice, room, texts[i], f"burst{i}.csv", _content(i, file_bytes))
                    for i in range(n_files)
                )
            )
            counters = fetcher.counters
            await wait_until(
                _async(lambda: counters.downloaded + counters.failed >= n_files),
                within=600,
                interval=0.1,
                what="every file fetched",
            )
            wall = time.perf_counter() - t0
            return {
                "files": n_files,
                "file_kb": file_bytes // 1024,
                "fetches_allowed": fetcher.settings.fetches,
                "memory_bytes_allowed": fetcher.settings.memory_bytes,
                "peak_downloads_at_once": counters.peak_in_flight,
                "peak_file_bytes_held": counters.peak_held_bytes,
                "downloaded": counters.downloaded,
                "failed": counters.failed,
                "cached": counters.cached,
                "seconds_until_all_fetched": round(wall, 2),
            }
        finally:
            await fleet.stop()
            await drv.close()
            stop_process(proc)


async def _post(
    drv: Driver, user: str, room: str, texts: list[str], extra: dict[str, int], rate: float
) -> None:
    """All at once in one driver call (as fleet_bench posts), or ten at a time at ``rate``."""
    if rate <= 0:
        await drv.post("bulk_post", {"user_id": user, "channel": room, "texts": texts} | extra)
        return
    t0 = time.perf_counter()
    for i in range(0, len(texts), 10):
        await drv.post("bulk_post", {"user_id": user, "channel": room, "texts": texts[i : i + 10]} | extra)
        await asyncio.sleep(max(0.0, t0 + (i + 10) / rate - time.perf_counter()))


def _fleet_acks(fleet: Fleet) -> tuple[float, float]:
    """(envelopes acked, seconds they waited for their acks), summed over the instances."""
    tallies = fleet.metrics.tallies.values()
    return float(sum(t.ack_latency.count for t in tallies)), sum(t.ack_latency.total for t in tallies)


async def _all_fetched(fetcher: Any, n: int) -> int:
    """Once the burst's turns have run: every file downloaded (the run did what it says)."""
    counters = fetcher.counters
    await wait_until(_async(lambda: counters.downloaded + counters.failed >= n), within=300, what="files")
    return int(counters.downloaded)


def _async(check: Any) -> Any:
    async def probe() -> bool:
        return bool(check())

    return probe


async def run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {
        "targets": {
            "ratio_acks_files_over_plain": f">= {TARGET_ACK_RATIO}",
            "peak_downloads_at_once": f"<= {DEFAULT_FILE_FETCHES}",
            "peak_file_bytes_held": f"<= {DEFAULT_FILE_MEMORY_BYTES}",
        }
    }
    if not args.skip_acks:
        result["acks"] = await phase_acks(args.messages, args.rounds, args.file_kb * 1024)
    if not args.skip_steady:
        n = int(args.rate * args.rate_seconds)
        result["steady"] = await phase_acks(n, args.rounds, args.file_kb * 1024, rate=args.rate)
    if not args.skip_burst:
        result["burst"] = await phase_burst(args.burst, args.burst_kb * 1024)
    return result


def summary(r: dict[str, Any]) -> str:
    lines = []
    for phase in ("acks", "steady"):
        if phase not in r:
            continue
        a = r[phase]
        lines.append(
            f"{phase} ({a['rate_per_s']}/s), {a['messages']} messages"
            f" (1 in 10 with a {a['file_kb']} KB file),"
            f" median of {a['rounds']}:"
            f" plain {a['plain_envelopes_acked_per_s']}/s, files {a['files_envelopes_acked_per_s']}/s,"
            f" ratio {a['ratio_acks_files_over_plain']} (target >= {TARGET_ACK_RATIO});"
            f" p50 {a['plain_ack_p50_ms']} → {a['files_ack_p50_ms']} ms,"
            f" p99 {a['plain_ack_p99_ms']} → {a['files_ack_p99_ms']} ms;"
            f" the fleet's own mean arrival → ack {a['plain_fleet_ack_mean_ms']} →"
            f" {a['files_fleet_ack_mean_ms']} ms"
        )
    if "burst" in r:
        b = r["burst"]
        lines.append(
            f"burst of {b['files']} file messages ({b['file_kb']} KB each): at most"
            f" {b['peak_downloads_at_once']} downloads at once (allowed {b['fetches_allowed']}),"
            f" {b['peak_file_bytes_held']} file bytes held at once (allowed {b['memory_bytes_allowed']});"
            f" {b['downloaded']} downloaded, {b['failed']} failed, all in {b['seconds_until_all_fetched']} s"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--file-kb", type=int, default=200)
    p.add_argument("--burst", type=int, default=500)
    p.add_argument("--burst-kb", type=int, default=200)
    p.add_argument("--rate", type=float, default=100.0, help="messages a second in the steady phase")
    p.add_argument("--rate-seconds", type=float, default=10.0)
    p.add_argument("--skip-acks", action="store_true")
    p.add_argument("--skip-steady", action="store_true")
    p.add_argument("--skip-burst", action="store_true")
    args = p.parse_args()
    drop_proxies()
    configure_logging("warning")
    result = asyncio.run(run(args))
    print(json.dumps(result))
    print(summary(result))


if __name__ == "__main__":
    main()
