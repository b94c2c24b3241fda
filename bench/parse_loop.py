"""``parse_event`` over N of the pipeline bench's payloads, nothing else (for ``bench/parse_ir.sh``).

.venv/bin/python bench/parse_loop.py 3000
"""

from __future__ import annotations

import sys

from pipeline_bench import payload

from nanoslack.slack.parse import parse_event


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    for body in [payload(i) for i in range(n)]:
        parse_event(body, instance="dana", team_id="T0")


if __name__ == "__main__":
    main()
