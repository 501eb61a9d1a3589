#!/usr/bin/env bash
# Runs fencelock_bench against the local servers of scripts/servers.sh (started if needed) and
# writes its JSON lines to docs/benchmarks/results.jsonl (or $1). Numbers go to docs/BENCHMARKS.md.
#
#   scripts/bench.sh [RESULTS.jsonl] [-- fencelock_bench options, e.g. --seconds 10]
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

out=docs/benchmarks/results.jsonl
if [[ $# -gt 0 && $1 != -- ]]; then
  out=$1
  shift
fi
[[ ${1:-} == -- ]] && shift

./scripts/deps.sh
./scripts/build.sh
./scripts/servers.sh start >/dev/null
eval "$(./scripts/servers.sh env)"
mkdir -p "$(dirname "$out")"
build/fencelock_bench --redis "$FENCELOCK_REDIS_URI" --redlock "$FENCELOCK_REDLOCK_URI" \
  --postgres "$FENCELOCK_PG_URI" --etcd "$FENCELOCK_ETCD_URI" --json "$out" "$@"
echo "bench.sh: results in $out (servers left running; scripts/servers.sh stop)"
