#!/usr/bin/env bash
# Longer torture runs for docs/RELIABILITY.md: every backend x every fault kind, against the local
# servers of scripts/servers.sh (started if needed). Writes one JSON line per run to
# docs/reliability/results.jsonl (or $1) and prints a Markdown table of them.
#
#   scripts/reliability.sh [RESULTS.jsonl] [-- SECONDS_PER_RUN (default 60)]
#
# FENCELOCK_BIN names the binary (default build/fencelock; a copy lets you keep building while
# it runs); FENCELOCK_SKIP_BUILD=1 skips deps.sh and build.sh.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

out=docs/reliability/results.jsonl
if [[ $# -gt 0 && $1 != -- ]]; then
  out=$1
  shift
fi
[[ ${1:-} == -- ]] && shift
seconds=${1:-60}
bin=${FENCELOCK_BIN:-build/fencelock}

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
# One run: exit 1 (UNSAFE) and 2 (INCONCLUSIVE) are recorded, not fatal: the table must show them.
run() {
  local label=$1 uri=$2 fault=$3
  shift 3
  echo "reliability.sh: $label / $fault $* (${seconds}s)" >&2
  local line rc=0
  line=$(FENCELOCK_BACKEND="$uri" "$bin" torture --json --workers 3 \
    --duration "${seconds}s" --faults "$fault" "$@") || rc=$?
  [[ $rc == 0 || $rc == 1 || $rc == 2 ]] || exit "$rc"
  printf '{"label":"%s","fault":"%s","seconds":%s,"report":%s}\n' \
    "$label" "$fault" "$seconds" "$line" >>"$out"
}

for entry in "${backends[@]}"; do
  read -r label uri <<<"$entry"
  for fault in pause kill latency drop partition skew jump; do
    run "$label" "$uri" "$fault"
  done
  run "$label" "$uri" server-kill --server-control "$PWD/scripts/servers.sh"
done
# One Redis with the persistence fencing across restarts needs (AOF, appendfsync always), its own
# port and state directory; the control program (servers.sh) inherits the environment.
aof=(FENCELOCK_SERVICES=redis FENCELOCK_REDIS_PORTS=7111 FENCELOCK_REDIS_APPENDONLY=1
  FENCELOCK_STATE_DIR=/tmp/fencelock-servers-aof)
env "${aof[@]}" ./scripts/servers.sh start >/dev/null
export "${aof[@]}"
run "redis, AOF always" redis://127.0.0.1:7111 server-kill --server-control "$PWD/scripts/servers.sh"
./scripts/servers.sh stop >/dev/null
unset FENCELOCK_SERVICES FENCELOCK_REDIS_PORTS FENCELOCK_REDIS_APPENDONLY FENCELOCK_STATE_DIR
# The deliberately weaker fences: each must be caught (UNSAFE).
run "redis, write-only fence" "$FENCELOCK_REDIS_URI" pause --fence write-only
run "redis, no fence" "$FENCELOCK_REDIS_URI" pause --fence none

# The table: one row per run.
python3 - "$out" <<'PY'
import json, sys
cols = ["grants", "faults_injected", "fenced_violations", "lost_updates", "token_violations",
        "exclusion_violations", "late_lost", "unsignalled_expiries", "overlaps", "stale_rejected"]
print("| backend | fault | verdict | " + " | ".join(c.replace("_", " ") for c in cols) +
      " | took effect | max unavailable after heal (ms) |")
print("| --- " * (len(cols) + 5) + "|")
for line in open(sys.argv[1]):
    row = json.loads(line)
    r = row["report"]
    fault = r["by_fault"].get(row["fault"], {"count": 0, "effective": 0})
    print(f"| {row['label']} | {row['fault']} | {r['verdict']} | " +
          " | ".join(str(r[c]) for c in cols) +
          f" | {fault['effective']}/{fault['count']} | {r['max_unavailable_after_heal_ms']:.0f} |")
PY
