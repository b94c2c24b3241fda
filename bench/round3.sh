#!/usr/bin/env bash
# Round three's before/after table in one go: the old build and this one, same machine, same
# hour, alternating. Prints a markdown table (bench/round3_table.py) and keeps every JSON in OUT.
#   bench/round3.sh [OLD_REF] [OUT]        (defaults: main, /tmp/round3)
#   ROUNDS=5 MESSAGES=5000 PIPELINE_RUNS=3 CHARTS=docs/bench bench/round3.sh main
# CHARTS: the new build's fleet run also redraws the charts there (fleet_bench.py --charts).
# OLD_REF is checked out as a throwaway `git worktree` (removed at the end); both builds run
# with this tree's venv, each with its own bench scripts (PYTHONPATH, cwd).
set -euo pipefail
unset HTTP_PROXY HTTPS_PROXY http_proxy https_proxy
NEW="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$NEW/.venv/bin/python"
OLD_REF="${1:-main}"
OUT="${2:-/tmp/round3}"
ROUNDS="${ROUNDS:-5}"
MESSAGES="${MESSAGES:-5000}"
PIPELINE_RUNS="${PIPELINE_RUNS:-3}"
mkdir -p "$OUT"
OLD="$(mktemp -d /tmp/round3-old.XXXXXX)"
git -C "$NEW" worktree add -q --detach "$OLD" "$OLD_REF"
trap 'git -C "$NEW" worktree remove --force "$OLD"' EXIT

in_tree() {  # in_tree TREE NAME COMMAND…: stdout's JSON line to OUT/NAME.json, the load beside it
  local tree="$1" name="$2"
  shift 2
  { uptime; } >"$OUT/$name.load"
  # The rest of the output drained, not cut off: a bench printing its summary after the
  # JSON line must not die of a closed pipe (and take this script with it).
  (cd "$tree" && PYTHONPATH="$tree" "$PY" "$@") | { grep -m1 '^{' >"$OUT/$name.json"; cat >/dev/null; }
  { uptime; } >>"$OUT/$name.load"
}

for build in old new; do
  tree="$OLD"; charts=()
  if [ "$build" = new ]; then
    tree="$NEW"
    [ -n "${CHARTS:-}" ] && charts=(--charts "$NEW/$CHARTS")
  fi
  in_tree "$tree" "fleet-$build" bench/fleet_bench.py --messages "$MESSAGES" --rounds "$ROUNDS" \
    --skip-memory --skip-replies "${charts[@]}"
done
for i in $(seq "$PIPELINE_RUNS"); do
  for build in old new; do
    tree="$OLD"; [ "$build" = new ] && tree="$NEW"
    in_tree "$tree" "pipeline-$build-$i" bench/pipeline_bench.py --events 5000 --batch 64
  done
done
# The new build only: the bench script is the new build's (the old tree has none), and a
# database it sets up carries the new schema, which an older `nanoslack run` refuses.
in_tree "$NEW" pg-fleets-new bench/pg_fleets_bench.py --apps 60 --processes 3 \
  --messages "${PG_MESSAGES:-500}" --rounds "${PG_ROUNDS:-3}"
in_tree "$NEW" ack-write bench/ack_write_bench.py --acks 50000 --batch 64
in_tree "$NEW" socket bench/socket_bench.py --messages 3000 --rounds 3
{ uptime; "$NEW/bench/ir.sh" "$OLD" "$NEW"; "$NEW/bench/parse_ir.sh" "$OLD" "$NEW"; uptime; } >"$OUT/ir.txt"
"$PY" "$NEW/bench/round3_table.py" "$OUT" "$OLD_REF"
