#!/usr/bin/env bash
# Longer torture runs for docs/RELIABILITY.md: every backend x every fault kind, against the local
# servers of scripts/servers.sh (started if needed). Writes one JSON line per run to
# docs/reliability/results.jsonl (or $1) and prints a Markdown table of them.
#
#   scripts/reliability.sh [RESULTS.jsonl] [-- SECONDS_PER_RUN (default 60)]
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

out=docs/reliability/results.jsonl
if [[ $# -gt 0 && $1 != -- ]]; then
  out=$1
  shift
fi
[[ ${1:-} == -- ]] && shift
seconds=${1:-60}

if [[ -z ${FENCELOCK_SKIP_BUILD:-} ]]; then
  ./scripts/deps.sh
  ./scripts/build.sh
fi
./scripts/servers.sh start >/dev/null
eval "$(./scripts/servers.sh env)"
mkdir -p "$(dirname "$out")"
: >"$out"

backends=(
  "redis $FENCELOCK_REDIS_URI"
  "redlock $FENCELOCK_REDLOCK_URI"
  "pg_advisory $FENCELOCK_PG_URI"
  "pg_lease $FENCELOCK_PG_URI?mode=lease"
  "etcd $FENCELOCK_ETCD_URI"
)
for entry in "${backends[@]}"; do
  read -r label uri <<<"$entry"
  for fault in pause kill latency drop partition skew jump; do
    echo "reliability.sh: $label / $fault (${seconds}s)" >&2
    # Exit 1 (a safety violation) is recorded, not fatal: the table must show it.
    line=$(FENCELOCK_BACKEND="$uri" build/fencelock torture --json --workers 3 \
      --duration "${seconds}s" --faults "$fault") || [[ $? == 1 ]]
    printf '{"label":"%s","fault":"%s","seconds":%s,"report":%s}\n' \
      "$label" "$fault" "$seconds" "$line" >>"$out"
  done
done

# The table: one row per run (jq-free: the fields are flat numbers).
field() { grep -o "\"$2\":[^,}]*" <<<"$1" | head -1 | cut -d: -f2; }
echo "| backend | fault | seconds | grants | faults | fenced violations | lost updates | late lost() | overlaps | stale rejected | max unavailable after heal (ms) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
while IFS= read -r line; do
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.0f |\n' \
    "$(field "$line" label | tr -d '"')" "$(field "$line" fault | tr -d '"')" \
    "$(field "$line" seconds)" "$(field "$line" grants)" "$(field "$line" faults_injected)" \
    "$(field "$line" fenced_violations)" "$(field "$line" lost_updates)" \
    "$(field "$line" late_lost)" "$(field "$line" overlaps)" "$(field "$line" stale_rejected)" \
    "$(field "$line" max_unavailable_after_heal_ms)"
done <"$out"
