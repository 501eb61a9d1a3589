#!/usr/bin/env bash
# Runs `fencelock bench` scenarios against the local servers of scripts/servers.sh and draws the
# plots of docs/BENCHMARKS.md with gnuplot (installed with jq if missing):
#   docs/benchmarks/throughput.svg  cycles/s vs concurrent lockers, per backend
#   docs/benchmarks/held.svg        client CPU vs leases held (TTL 30 s, held 30 s), per backend
#   docs/benchmarks/held-memory.svg client memory per lease vs leases held
# Raw results: docs/benchmarks/plots.jsonl.
#
#   scripts/plots.sh [SECONDS_PER_POINT (default 5)]
#   scripts/plots.sh --plot-only     redraw from docs/benchmarks/plots.jsonl without measuring
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

plot_only=""
if [[ ${1:-} == --plot-only ]]; then
  plot_only=1
  shift
fi
seconds=${1:-5}
out=docs/benchmarks
if ! command -v gnuplot >/dev/null || ! command -v jq >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gnuplot-nox jq >/dev/null
fi
if [[ -z $plot_only ]]; then
  if [[ -z ${FENCELOCK_SKIP_BUILD:-} ]]; then
    ./scripts/deps.sh
    ./scripts/build.sh
  fi
  ./scripts/servers.sh start >/dev/null
  eval "$(./scripts/servers.sh env)"
  mkdir -p "$out"
  : >"$out/plots.jsonl"
fi

backends=(
  "redis ${FENCELOCK_REDIS_URI:-}"
  "redlock ${FENCELOCK_REDLOCK_URI:-}"
  "pg_advisory ${FENCELOCK_PG_URI:-}"
  "pg_lease ${FENCELOCK_PG_URI:-}?mode=lease"
  "etcd ${FENCELOCK_ETCD_URI:-}"
)
for entry in "${backends[@]}"; do
  [[ -z $plot_only ]] || break
  read -r label uri <<<"$entry"
  echo "plots.sh: $label" >&2
  # A failed point (e.g. PostgreSQL's lock table full) is reported and skipped, not fatal.
  build/fencelock bench --backend "$uri" --json --seconds "$seconds" --scenario throughput \
    --lockers 1,4,16,64,256 | jq -c --arg l "$label" '. + {label: $l}' >>"$out/plots.jsonl" || true
  for leases in 1000 10000; do
    # Held for one whole TTL (30 s): three renewal rounds.
    build/fencelock bench --backend "$uri" --json --seconds 30 --scenario held \
      --leases "$leases" --ttl 30s | jq -c --arg l "$label" '. + {label: $l}' >>"$out/plots.jsonl" || true
  done
done

data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
for entry in "${backends[@]}"; do
  read -r label _ <<<"$entry"
  jq -r --arg l "$label" 'select(.label == $l and .scenario == "throughput")
    | "\(.lockers) \(.fencelock.cycles_per_s)"' "$out/plots.jsonl" >"$data/throughput-$label"
  jq -r --arg l "$label" 'select(.label == $l and .scenario == "held")
    | "\(.leases) \(.client_cpu_share * 100) \(.bytes_per_lease)"' "$out/plots.jsonl" >"$data/held-$label"
done

plot_lines() {  # $1 file prefix, $2 column
  local entry label sep=""
  for entry in "${backends[@]}"; do
    read -r label _ <<<"$entry"
    printf '%s"%s/%s-%s" using 1:%s with linespoints title "%s"' "$sep" "$data" "$1" "$label" "$2" "$label"
    sep=", "
  done
}

gnuplot <<GNUPLOT
set terminal svg size 720,420 font "sans,11" noenhanced
set output "$out/throughput.svg"
set title "Acquire+release cycles/s vs concurrent lockers (distinct keys, one Client)"
set xlabel "concurrent lockers"
set ylabel "cycles/s"
set logscale x 2
set key top left
set grid
plot $(plot_lines throughput 2)
set output "$out/held.svg"
set title "Holding N leases with renewal (TTL 30 s): client CPU"
set xlabel "leases held"
set ylabel "client CPU, % of one core"
set logscale x 10
plot $(plot_lines held 2)
set output "$out/held-memory.svg"
set title "Holding N leases: client memory per lease"
set ylabel "bytes per lease (resident set growth / N)"
plot $(plot_lines held 3)
GNUPLOT
echo "plots.sh: wrote $out/throughput.svg, $out/held.svg, $out/held-memory.svg" >&2
