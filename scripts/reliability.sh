#!/usr/bin/env bash
# Longer torture runs for docs/RELIABILITY.md: every backend x every fault kind, against the local
# servers of scripts/servers.sh (started if needed). Writes one JSON line per run to
# docs/reliability/results.jsonl (or $1) and prints a Markdown table of them.
#
#   scripts/reliability.sh [RESULTS.jsonl] [-- SECONDS_PER_RUN (default 60)]
#
# FENCELOCK_BIN names the binary (default build/fencelock; a copy lets you keep building while
# it runs); FENCELOCK_SKIP_BUILD=1 skips deps.sh and build.sh. FENCELOCK_RELIABILITY_GROUPS picks
# the rows (default "base lock-faults": base = every backend x the first eight fault kinds, the AOF
# row and the weaker fences; lock-faults = the fault classes that act on the lock itself: admin-delete, delay-one,
# cancel-race, minority-stall, many-leases, evict, server-kill against a lazy WAL writer, failover
# to an asynchronous and a synchronous standby);
# FENCELOCK_RELIABILITY_APPEND=1 adds to RESULTS instead of starting it afresh.
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
[[ -n ${FENCELOCK_RELIABILITY_APPEND:-} ]] || : >"$out"
groups=" ${FENCELOCK_RELIABILITY_GROUPS:-base lock-faults} "

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

control=(--server-control "$PWD/scripts/servers.sh")
if [[ $groups == *" base "* ]]; then
for entry in "${backends[@]}"; do
  read -r label uri <<<"$entry"
  for fault in pause kill latency drop partition skew jump; do
    run "$label" "$uri" "$fault"
  done
  run "$label" "$uri" server-kill "${control[@]}"
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
fi
if [[ $groups == *" lock-faults "* ]]; then
  for entry in "${backends[@]}"; do
    read -r label uri <<<"$entry"
    run "$label" "$uri" admin-delete "${control[@]}"
    run "$label" "$uri" delay-one
    run "$label" "$uri" cancel-race
    # The server SIGSTOPped (PostgreSQL: the postmaster and every backend; with one server it is
    # the whole backend). Short TTLs (etcd's minimum is 2 s).
    short=1s
    [[ $label == etcd ]] && short=2s
    run "$label" "$uri" minority-stall --ttl "$short" "${control[@]}"
    # 5000 long leases per worker (2000 on etcd, whose disk-bound writes take about 200
    # acquisitions a second per worker here); the partition makes the contended lease expire
    # unrenewed, so its lost() comes from the watchdog, whose lateness is counted. Critical
    # sections of 1 s, so that the partition finds a holder inside.
    extras=5000
    [[ $label == etcd ]] && extras=2000
    run "$label" "$uri" many-leases,partition --extra-leases "$extras" --critical 1s
  done
  # A small Redis cache (4 MB) filled with junk keys: evicting (allkeys-lru, accepted with
  # allow_eviction=true: what fencelock refuses by default) and not (noeviction).
  for policy in allkeys-lru noeviction; do
    small=(FENCELOCK_SERVICES=redis FENCELOCK_REDIS_PORTS=7121 FENCELOCK_REDIS_MAXMEMORY=4mb
      "FENCELOCK_REDIS_POLICY=$policy" "FENCELOCK_STATE_DIR=/tmp/fencelock-servers-$policy")
    env "${small[@]}" ./scripts/servers.sh start >/dev/null
    query=""
    [[ $policy == allkeys-lru ]] && query="?allow_eviction=true"
    (export "${small[@]}" && run "redis, $policy 4 MB" "redis://127.0.0.1:7121$query" evict \
      --ttl 1s "${control[@]}")
    env "${small[@]}" ./scripts/servers.sh stop >/dev/null
  done
  # PostgreSQL with synchronous_commit = off and a WAL writer that flushes every 10 s, crashed:
  # the commits of the last seconds are lost unless fencelock forces synchronous_commit = on.
  FENCELOCK_SERVICES=postgres ./scripts/servers.sh stop >/dev/null
  FENCELOCK_SERVICES=postgres FENCELOCK_PG_WAL_WRITER_DELAY=10s ./scripts/servers.sh start >/dev/null
  for entry in "pg_advisory $FENCELOCK_PG_URI" "pg_lease $FENCELOCK_PG_URI?mode=lease"; do
    read -r label uri <<<"$entry"
    (export FENCELOCK_PG_WAL_WRITER_DELAY=10s &&
      run "$label, lazy WAL" "$uri" server-kill "${control[@]}")
  done
  FENCELOCK_SERVICES=postgres ./scripts/servers.sh stop >/dev/null
  FENCELOCK_SERVICES=postgres ./scripts/servers.sh start >/dev/null
  # A primary with a streaming standby, failed over after replication stalled for 4 TTL:
  # asynchronous (unsupported: tokens can repeat) and synchronous. A fresh pair per run, in its
  # own state directory (a failed-over primary stays down).
  for sync in 0 1; do
    for mode in advisory lease; do
      pair=(FENCELOCK_SERVICES=postgres FENCELOCK_PG_PORT=7241 FENCELOCK_PG_STANDBY_PORT=7242
        "FENCELOCK_PG_SYNC=$sync" FENCELOCK_STATE_DIR=/tmp/fencelock-servers-failover)
      env "${pair[@]}" ./scripts/servers.sh stop >/dev/null
      rm -rf /tmp/fencelock-servers-failover
      env "${pair[@]}" ./scripts/servers.sh start >/dev/null
      pair_uri=$(env "${pair[@]}" ./scripts/servers.sh env | sed -n 's/^export FENCELOCK_PG_URI=//p')
      (export "${pair[@]}" && run "pg_$mode, $([[ $sync == 1 ]] && echo sync || echo async) standby" \
        "$pair_uri&mode=$mode" failover "${control[@]}")
      env "${pair[@]}" ./scripts/servers.sh stop >/dev/null
    done
  done
  rm -rf /tmp/fencelock-servers-failover
fi

# The table: one row per run.
python3 - "$out" <<'PY'
import json, sys
cols = ["grants", "faults_injected", "fenced_violations", "lost_updates", "token_violations",
        "exclusion_violations", "late_lost", "unsignalled_expiries", "deletions_unnoticed",
        "left_held", "overlaps", "stale_rejected"]
print("| backend | fault | verdict | " + " | ".join(c.replace("_", " ") for c in cols) +
      " | took effect | max unavailable after heal (ms) |")
print("| --- " * (len(cols) + 5) + "|")
for line in open(sys.argv[1]):
    row = json.loads(line)
    r = row["report"]
    kind = row["fault"].split(",")[0]
    fault = r["by_fault"].get(kind, {"count": 0, "effective": 0})
    print(f"| {row['label']} | {row['fault']} | {r['verdict']} | " +
          " | ".join(str(r.get(c, "")) for c in cols) +
          f" | {fault['effective']}/{fault['count']} | {r['max_unavailable_after_heal_ms']:.0f} |")
PY
