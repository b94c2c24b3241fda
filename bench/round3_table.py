"""The before/after table of ``bench/round3.sh`` from the JSON it left in OUT.

.venv/bin/python bench/round3_table.py /tmp/round3 main
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any


def _json(out: Path, name: str) -> dict[str, Any]:
    path = out / f"{name}.json"
    try:
        loaded: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return loaded


def _load(out: Path, name: str) -> str:
    """The load averages (1 min) at the start and the end of a run."""
    path = out / f"{name}.load"
    if not path.exists():
        return "?"
    lines = path.read_text().splitlines()
    return " → ".join(line.split("load average:")[-1].split(",")[0].strip() for line in lines)


def _fleet_rows(out: Path) -> list[tuple[str, str, str]]:
    old, new = _json(out, "fleet-old"), _json(out, "fleet-new")

    def rounds(r: dict[str, Any], key: str) -> str:
        rs = r.get("rounds") or []
        if not rs:
            return "—"
        values = [x[key] for x in rs]
        return f"**{statistics.median(values):.2f}×** ({', '.join(f'{v:.2f}' for v in values)})"

    def lowest(r: dict[str, Any]) -> str:
        rs = r.get("rounds") or []
        return f"{min(x['ratio_acks'] for x in rs):.2f}×" if rs else "—"

    def cpu(r: dict[str, Any]) -> str:
        rs = r.get("rounds") or []
        return f"{statistics.median(x['fleet_cpu_us_per_envelope'] for x in rs):.0f}" if rs else "—"

    def bare_cpu(r: dict[str, Any]) -> str:
        rs = [x["bare_cpu_us_per_envelope"] for x in r.get("rounds") or [] if x["bare_cpu_us_per_envelope"]]
        return f"{statistics.median(rs):.0f}" if rs else "—"

    def watchdog(r: dict[str, Any]) -> str:
        rs = r.get("rounds") or []
        return ", ".join(str(x.get("fleet_watchdog_reconnects", "?")) for x in rs) or "—"

    def latency(r: dict[str, Any], key: str) -> str:
        lat = (r.get("fleet") or {}).get(key)
        if not lat:
            return "—"
        return f"{lat['p99_ms']} ms (p50 {lat['p50_ms']}; {lat.get('envelopes_per_s', '?')} env/s)"

    return [
        ("acks vs bare bolt, median (rounds)", rounds(old, "ratio_acks"), rounds(new, "ratio_acks")),
        ("lowest round", lowest(old), lowest(new)),
        ("fully processed vs bare bolt", rounds(old, "ratio_processing"), rounds(new, "ratio_processing")),
        ("fleet CPU µs per envelope, median", cpu(old), cpu(new)),
        ("bare bolt CPU µs per envelope, median", bare_cpu(old), bare_cpu(new)),
        ("watchdog reconnects per round", watchdog(old), watchdog(new)),
        (
            "ack p99 while the queued turns drain",
            latency(old, "latency_while_turns_drain"),
            latency(new, "latency_while_turns_drain"),
        ),
        ("ack p99 steady, agents answering", latency(old, "latency"), latency(new, "latency")),
        ("load (1 min) start → end", _load(out, "fleet-old"), _load(out, "fleet-new")),
    ]


def _pipeline_row(out: Path) -> tuple[str, str, str]:
    def runs(build: str) -> str:
        found = sorted(out.glob(f"pipeline-{build}-*.json"))
        rates = [_json(out, p.stem).get("events_per_s") for p in found]
        cpus = [_json(out, p.stem).get("cpu_us_per_event") for p in found]
        if not rates:
            return "—"
        return f"{', '.join(str(r) for r in rates)} ({', '.join(str(c) for c in cpus)} µs CPU)"

    return ("`pipeline_bench.py --events 5000 --batch 64`, events/s", runs("old"), runs("new"))


def _pg_row(out: Path) -> tuple[str, str, str]:
    def ratio(build: str) -> str:
        r = _json(out, f"pg-fleets-{build}")
        if not r:
            return "—"
        rounds = ", ".join(str(x["ratio_acks"]) for x in r["rounds"])
        return f"**{r['ratio_acks']:.2f}×** ({rounds}; load {_load(out, f'pg-fleets-{build}')})"

    name = "3 `nanoslack run` on one PostgreSQL, 60 instances: acks vs bare bolt"
    return (name, ratio("old"), ratio("new"))


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/round3")
    old_ref = sys.argv[2] if len(sys.argv) > 2 else "old"
    rows = [*_fleet_rows(out), _pipeline_row(out), _pg_row(out)]
    ir = out / "ir.txt"
    if ir.exists():
        counts = [line.split(": ")[-1] for line in ir.read_text().splitlines() if "instructions" in line]
        if len(counts) >= 2:
            rows.append(("instructions per event (`bench/ir.sh`)", counts[0], counts[1]))
        if len(counts) >= 4:
            rows.append(("instructions per `parse_event` (`bench/parse_ir.sh`)", counts[2], counts[3]))
    print(f"| figure | old build (`{old_ref}`) | new build |")
    print("|---|---|---|")
    for name, before, after in rows:
        print(f"| {name} | {before} | {after} |")
    ack = _json(out, "ack-write")
    if ack:
        print(
            f"\nAck writes, µs CPU per ack (load {_load(out, 'ack-write')}): aiohttp `send_str` each "
            f"{ack['aiohttp_send_str_us_per_ack']}, one write each {ack['write_each_us_per_ack']}, "
            f"one write per batch of {ack['batch']} {ack['write_batch_us_per_ack']}"
        )
    sock = _json(out, "socket")
    if sock:
        print(
            f"Socket edge alone (load {_load(out, 'socket')}): acks/s {sock.get('acks_per_s_median')}, "
            f"µs CPU/envelope {sock.get('cpu_us_per_envelope_median')}, ratio {sock.get('ratio_to_bolt')}"
        )


if __name__ == "__main__":
    main()
