#!/usr/bin/env bash
# Instructions per event of the pipeline (parse → inbox → guard → router → gate → inbox closed)
# under callgrind, for each source tree given (e.g. a `git worktree` of the previous commit and
# this one): Ir(--events 1800) − Ir(--events 600), divided by 1200, so imports and start-up
# cancel out. Deterministic enough to compare CPU work on a machine others are using.
#   bench/ir.sh /path/to/old-tree .
set -euo pipefail
VENV_PY="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv/bin/python"
for tree in "$@"; do
  tree="$(cd "$tree" && pwd)"
  counts=()
  for n in 600 1800; do
    out="$(mktemp)"
    (cd "$tree" && PYTHONPATH="$tree" valgrind --tool=callgrind --callgrind-out-file=/dev/null \
      "$VENV_PY" bench/pipeline_bench.py --events "$n" --batch 64 >/dev/null 2>"$out")
    counts+=("$(grep -o 'Collected : [0-9]*' "$out" | grep -o '[0-9]*$')")
    rm -f "$out"
  done
  echo "$tree: $(( (counts[1] - counts[0]) / 1200 )) instructions per event"
done
