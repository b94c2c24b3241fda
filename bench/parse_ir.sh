#!/usr/bin/env bash
# Instructions per parse_event under callgrind, for each source tree given: Ir(3000) − Ir(1000)
# over 2000 (building the payloads included, the same in every tree), as bench/ir.sh does.
#   bench/parse_ir.sh /path/to/old-tree .
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV_PY="$HERE/../.venv/bin/python"
for tree in "$@"; do
  tree="$(cd "$tree" && pwd)"
  counts=()
  for n in 1000 3000; do
    out="$(mktemp)"
    (cd "$tree" && PYTHONPATH="$tree:$HERE" valgrind --tool=callgrind --callgrind-out-file=/dev/null \
      "$VENV_PY" "$HERE/parse_loop.py" "$n" >/dev/null 2>"$out")
    counts+=("$(grep -o 'Collected : [0-9]*' "$out" | grep -o '[0-9]*$')")
    rm -f "$out"
  done
  echo "$tree: $(( (counts[1] - counts[0]) / 2000 )) instructions per parse"
done
