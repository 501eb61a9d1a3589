#!/usr/bin/env bash
# Runs `fencelock bench` scenarios against the local servers of scripts/servers.sh, and
# scripts/ceiling.sh (redis-benchmark, pgbench), and draws the plots of docs/BENCHMARKS.md with
# gnuplot (installed with jq if missing):
#   docs/benchmarks/latency-cdf.svg   uncontended acquire+release latency CDF, fencelock and the
#                                     bare-protocol baseline of the same run, per backend
#   docs/benchmarks/throughput.svg    cycles/s vs concurrent lockers, per backend, with the
#                                     redis-benchmark / pgbench ceiling for the same statements
#   docs/benchmarks/held.svg          client CPU vs leases held (TTL 30 s, held 30 s)
#   docs/benchmarks/held-memory.svg   client memory per lease vs leases held
#   docs/benchmarks/held-requests.svg renewal requests per round vs leases held
# Raw results: docs/benchmarks/plots.jsonl and docs/benchmarks/ceiling.jsonl.
# Takes about 25 minutes on 2 cores (100,000 held leases per backend dominate).
#
#   scripts/plots.sh [SECONDS_PER_POINT (default 5)]
#   scripts/plots.sh --plot-only     redraw from the .jsonl files without measuring
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
  build/fencelock bench --backend "$uri" --json --seconds "$seconds" --scenario uncontended |
    jq -c --arg l "$label" '. + {label: $l}' >>"$out/plots.jsonl" || true
  build/fencelock bench --backend "$uri" --json --seconds "$seconds" --scenario throughput \
    --lockers 1,4,16,64,256 | jq -c --arg l "$label" '. + {label: $l}' >>"$out/plots.jsonl" || true
  # PostgreSQL's shared lock table holds about 23,000 advisory locks (docs/PROTOCOLS.md).
  most=100000
  [[ $label == pg_advisory ]] && most=20000
  for leases in 1000 10000 "$most"; do
    # Held for one whole TTL (30 s): three renewal rounds.
    build/fencelock bench --backend "$uri" --json --seconds 30 --scenario held \
      --leases "$leases" --ttl 30s | jq -c --arg l "$label" '. + {label: $l}' >>"$out/plots.jsonl" || true
  done
done
if [[ -z $plot_only ]]; then
  FENCELOCK_SKIP_BUILD=1 ./scripts/ceiling.sh "$out/ceiling.jsonl" --seconds "$seconds"
fi

data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
for entry in "${backends[@]}"; do
  read -r label _ <<<"$entry"
  jq -r --arg l "$label" 'select(.label == $l and .scenario == "throughput")
    | "\(.lockers) \(.fencelock.cycles_per_s)"' "$out/plots.jsonl" >"$data/throughput-$label"
  jq -r --arg l "$label" 'select(.label == $l and .scenario == "held")
    | "\(.leases) \(.client_cpu_share * 100) \(.bytes_per_lease) \(.requests_per_round // "NaN")"' \
    "$out/plots.jsonl" | sort -n >"$data/held-$label"
  jq -r --arg l "$label" 'select(.label == $l and .scenario == "uncontended")
    | .fencelock.latency.cdf[] | "\(.[1]) \(.[0])"' "$out/plots.jsonl" >"$data/cdf-$label"
  jq -r --arg l "$label" 'select(.label == $l and .scenario == "uncontended")
    | .baseline.latency.cdf[] | "\(.[1]) \(.[0])"' "$out/plots.jsonl" >"$data/cdf-base-$label"
  jq -r --arg l "$label" 'select(.label == $l and .scenario == "ceiling")
    | "\(.clients) \(.cycles_per_s)"' "$out/ceiling.jsonl" 2>/dev/null >"$data/ceiling-$label" || true
done

plot_lines() {  # $1 file prefix, $2 column; one colour per backend, as in every plot
  local entry label sep="" colour=0
  for entry in "${backends[@]}"; do
    read -r label _ <<<"$entry"
    colour=$((colour + 1))
    printf '%s"%s/%s-%s" using 1:%s with linespoints lc %d title "%s"' "$sep" "$data" "$1" "$label" "$2" "$colour" "$label"
    sep=", "
  done
}

# Dashed companions of plot_lines: the same colour per backend, for files that are not empty.
dashed_lines() {  # $1 file prefix, $2 title suffix, $3 style
  local entry label colour=0
  for entry in "${backends[@]}"; do
    read -r label _ <<<"$entry"
    colour=$((colour + 1))
    [[ -s $data/$1-$label ]] || continue
    printf ', "%s/%s-%s" using 1:2 with %s dt 2 lc %d title "%s %s"' "$data" "$1" "$label" "$3" "$colour" "$label" "$2"
  done
}

gnuplot <<GNUPLOT
set terminal svg size 720,420 font "sans,11" noenhanced
set output "$out/latency-cdf.svg"
set title "Uncontended acquire+release latency CDF (solid: fencelock, dashed: bare protocol)"
set xlabel "latency, us (log)"
set ylabel "fraction of cycles"
set logscale x 10
set yrange [0:1]
set key bottom right
set grid
plot $(plot_lines cdf 2 | sed 's/with linespoints/with lines/g')$(dashed_lines cdf-base baseline lines)
unset logscale
set autoscale y
set output "$out/throughput.svg"
set title "Acquire+release cycles/s vs concurrent lockers (dashed: redis-benchmark / pgbench)"
set xlabel "concurrent lockers"
set ylabel "cycles/s"
set logscale x 2
set key top left
set grid
plot $(plot_lines throughput 2)$(dashed_lines ceiling ceiling linespoints)
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
set output "$out/held-requests.svg"
set title "Holding N leases: requests the servers receive per renewal round (all servers)"
set ylabel "requests per renewal round (log)"
set logscale y 10
plot $(plot_lines held 4)
GNUPLOT
echo "plots.sh: wrote $out/{latency-cdf,throughput,held,held-memory,held-requests}.svg" >&2
