"""Emulator throughput: envelopes/s delivered to and acked by 10 bolt apps in one MPIM.

The emulator runs in a subprocess (its own core); this process runs 10 slack-bolt AsyncApps with
AsyncSocketModeHandler and a no-op listener that acks. Human messages are posted through the HTTP
driver's bulk endpoint. Prints one JSON object and one line of text.

    .venv/bin/python bench/emulator_bench.py [--apps 10] [--messages 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from _common import connect_bare_bolt_apps, drop_proxies, proc_cpu, start_emulator

from nanoslack.emulator import EmulatorClient


async def run(n_apps: int, n_messages: int) -> dict[str, Any]:
    drop_proxies()
    proc, info = start_emulator(n_apps)
    try:
        drv = EmulatorClient(info["base_url"])
        handlers = await connect_bare_bolt_apps(info)
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + 20
        while (await loop.run_in_executor(None, drv.stats))["connections"] < n_apps:
            if time.monotonic() > deadline:
                raise TimeoutError("apps did not connect")
            await asyncio.sleep(0.05)
        alice = info["users"][0]["id"]
        channel = info["conversations"][0]["id"]
        # warm-up (bolt's lazy auth.test etc.)
        await loop.run_in_executor(None, lambda: drv.bulk_post(alice, channel, count=20, text="warm"))
        target = 20 * n_apps
        while (await loop.run_in_executor(None, drv.stats))["acked"] < target:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        base = await loop.run_in_executor(None, drv.stats)
        expected = base["acked"] + n_messages * n_apps
        cpu0 = proc_cpu(proc.pid)
        self0 = time.process_time()
        t0 = time.perf_counter()
        post = loop.run_in_executor(
            None, lambda: drv.bulk_post(alice, channel, count=n_messages, text="bench")
        )
        deadline = time.monotonic() + 300
        while True:
            s = await loop.run_in_executor(None, drv.stats)
            if s["acked"] >= expected:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"not all acked: {s}")
            await asyncio.sleep(0.02)
        elapsed = time.perf_counter() - t0
        emu_cpu = proc_cpu(proc.pid) - cpu0
        bench_cpu = time.process_time() - self0
        await post
        envelopes = n_messages * n_apps
        result = {
            "apps": n_apps,
            "messages": n_messages,
            "envelopes": envelopes,
            "seconds": round(elapsed, 3),
            "envelopes_per_s": round(envelopes / elapsed),
            "redelivered": s["redelivered"] - base["redelivered"],
            "emulator_cpu_us_per_envelope": round(emu_cpu / envelopes * 1e6, 1),
            "clients_cpu_us_per_envelope": round(bench_cpu / envelopes * 1e6, 1),
        }
        for h in handlers:
            await h.close_async()
        return result
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--apps", type=int, default=10)
    p.add_argument("--messages", type=int, default=2000)
    args = p.parse_args()
    r = asyncio.run(run(args.apps, args.messages))
    print(json.dumps(r))
    print(
        f"emulator: {r['envelopes']} envelopes to {r['apps']} bolt apps delivered+acked in "
        f"{r['seconds']} s = {r['envelopes_per_s']} envelopes/s"
    )


if __name__ == "__main__":
    main()
