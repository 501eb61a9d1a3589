#!/usr/bin/env bash
# Measures the server-side ceiling for the commands fencelock sends, with the servers' own stock
# load tools, on the local servers of scripts/servers.sh (started if needed), so that
# docs/BENCHMARKS.md can set fencelock's `throughput` scenario (cycles/s vs concurrent lockers)
# beside it. One cycle = acquire + release of a free key. The tools do little besides sending, so
# they show the servers' capacity for these commands; not a strict upper bound for fencelock,
# whose lockers reuse their keys (see the Redis method below and docs/BENCHMARKS.md).
#
#   scripts/ceiling.sh [OUT.jsonl] [--seconds N] [--clients 1,4,16,64,256] [--only LABEL,...]
#
# OUT.jsonl (default docs/benchmarks/ceiling.jsonl) is truncated, then gets one JSON object per
# point: {"scenario":"ceiling","label":..,"tool":..,"clients":C,"cycles_per_s":..,"method":..}.
# --seconds: measuring time per point and step (default 5). LABEL: redis, pg_advisory, pg_lease
# (the labels of scripts/plots.sh).
#
# redis (one instance, FENCELOCK_REDIS_URI), redis-benchmark -c C:
#   EVALSHA of src/redis/scripts/acquire.lua (round 1 of an acquisition; one instance needs no
#   round 2) and of release.lua, loaded with SCRIPT LOAD, with fencelock's key names
#   fencelock:{ceiling/__rand_int__}[:fence|:holder|:queue|:queue_exp|:queue_wake] and
#   fencelock's arguments (32-hex owner, ttl 10000 ms, process-like metadata, queue hold 0, a
#   ticket, a wake channel; release: owner, leave queue '1'). redis-benchmark runs one command
#   per invocation and replaces EVERY __rand_int__ with its OWN random number (checked with
#   MONITOR: the six keys of one call carry six different numbers), so the keys of one call do
#   not share a lock name, and a release cannot follow its own acquire. Neither changes the work
#   on a standalone server (each key is a separate lookup anyway), so the two steps are
#   measured separately and combined: cycles/s = 1 / (1/acquire_per_s + 1/release_per_s)
#   (server time per cycle = the sum of both; with C = 1 the latencies add the same way).
#   - acquire: -r 1e9 (fresh keys: every call takes the grant path: SET NX, INCR, SET holder).
#     Checked: fence counters created / calls = granted_fraction (a refused call makes none).
#   - release: first K = 8 x requests lock and holder keys fencelock:{ceiling/000000000000..}
#     are created as held by the owner, then -r K: most calls find their lock held by the owner
#     and take the delete path. Checked: lock keys deleted / calls = released_fraction (about
#     0.94; the rest find a key already released: the compare-only path).
#   Requests per step = the rate of a short calibration run x --seconds. Runs in the database
#   FENCELOCK_CEILING_REDIS_DB (default 9), which is flushed before, between and after steps.
#   INFO commandstats failed_calls of evalsha must stay unchanged (else a warning).
# pg_advisory / pg_lease (FENCELOCK_PG_URI), pgbench -n -M extended (libpq's PQsendQueryParams,
#   as fencelock) -c C -j min(2,C) -T SECONDS, one pgbench transaction = one cycle, two
#   autocommitted statements, the library's own SQL with $N replaced by pgbench variables:
#   - advisory: src/postgres/sql/advisory_try.sql, then SELECT pg_advisory_unlock($1::bigint)
#     (advisory_backend.cpp); checked: draws of the count (fencelock_advisory_live) / cycles =
#     granted_fraction
#     (drawn only on a grant), no "you don't own a lock" WARNING.
#   - lease: src/postgres/sql/lease_acquire.sql, then lease_release.sql (postgres_backend.cpp);
#     checked: fencelock_tokens draws - cycles = grants (the INSERT's VALUES draws one per call,
#     the UPDATE of an expired row one more per grant; a missed release would refuse the next).
#   Like fencelock's throughput scenario, each client cycles on a key of its own (name and
#   advisory key 7100000000 + client_id), so rows are updated, not inserted, after the first
#   cycle (one warm-up transaction per client comes first). A point is skipped, with the
#   reason, when C exceeds the connections the server has left (max_connections -
#   superuser_reserved_connections - connections open now).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

die() {
  echo "ceiling.sh: $*" >&2
  exit 1
}
say() { echo "ceiling.sh: $*" >&2; }

out=docs/benchmarks/ceiling.jsonl
seconds=5
clients=1,4,16,64,256
only=redis,pg_advisory,pg_lease
positional=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --seconds) seconds=${2:?--seconds needs a value}; shift 2 ;;
    --clients) clients=${2:?--clients needs a value}; shift 2 ;;
    --only) only=${2:?--only needs a value}; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (try --help)" ;;
    *)
      ((positional++ == 0)) || die "one output file only (try --help)"
      out=$1
      shift
      ;;
  esac
done
[[ $seconds =~ ^[1-9][0-9]*$ ]] || die "--seconds must be a positive integer"
IFS=', ' read -r -a CLIENTS <<<"$clients"
for c in "${CLIENTS[@]}"; do [[ $c =~ ^[1-9][0-9]*$ ]] || die "bad client count '$c'"; done
wants() { [[ ",$only," == *",$1,"* ]]; }

if ! command -v jq >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq jq >/dev/null
fi
PG_BIN=${FENCELOCK_PG_BINDIR:-/usr/lib/postgresql/15/bin}
PGBENCH=$PG_BIN/pgbench
[[ -x $PGBENCH ]] || PGBENCH=$(command -v pgbench || true)
if wants redis; then
  command -v redis-benchmark >/dev/null || die "redis-benchmark not found: run scripts/deps.sh"
fi
if wants pg_advisory || wants pg_lease; then
  [[ -n $PGBENCH ]] || die "pgbench not found in $PG_BIN or on PATH"
  command -v psql >/dev/null || die "psql not found: run scripts/deps.sh"
fi

./scripts/servers.sh start >/dev/null
eval "$(./scripts/servers.sh env)"
mkdir -p "$(dirname "$out")"
: >"$out"

cores=$(nproc)
owner=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')  # 32 hex digits, like OwnerId::hex
value=$owner$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')  # an attempt's lock value
ttl_ms=10000
# The shape of fencelock's default holder metadata (client_core.cpp, process_metadata).
metadata=$(jq -nc --arg h "$(hostname)" --argjson p $$ '{host: $h, pid: $p, program: "fencelock"}')
tmp=$(mktemp -d)

# Appends one point: $1 label, $2 tool, $3 clients, $4 cycles/s, $5 method, $6 extra JSON object.
emit() {
  jq -nc --arg lbl "$1" --arg tool "$2" --argjson c "$3" --argjson rate "$4" --arg m "$5" \
    --argjson extra "$6" --argjson cores "$cores" --argjson s "$seconds" \
    '{scenario: "ceiling", label: $lbl, tool: $tool, clients: $c, cycles_per_s: $rate,
      seconds: $s, cores: $cores, method: $m} + $extra' | tee -a "$out"
}

# --- Redis -------------------------------------------------------------------------------------

REDIS_DB=${FENCELOCK_CEILING_REDIS_DB:-9}
rcli() { redis-cli -u "$FENCELOCK_REDIS_URI" -n "$REDIS_DB" "$@"; }
rflush() { [[ $(rcli flushdb) == OK ]] || die "FLUSHDB of Redis database $REDIS_DB failed"; }
rcount() { rcli eval "return #redis.call('KEYS', ARGV[1])" 0 "$1"; }
rfailed() {  # failed_calls + rejected_calls of EVALSHA so far
  rcli info commandstats | tr -d '\r' |
    awk -F'[:,=]' '$1 == "cmdstat_evalsha" {
      for (i = 2; i < NF; i += 2) if ($i ~ /^(failed|rejected)_calls$/) n += $(i + 1) }
      END { print n + 0 }'
}
# Requests per second of one redis-benchmark run: $1 clients, $2 requests, $3 keyspace, rest the
# command. --csv: the last line's 7th field from the end is "rps" (the title may hold quotes).
rbench() {
  local c=$1 n=$2 r=$3
  shift 3
  redis-benchmark -u "$FENCELOCK_REDIS_URI" --dbnum "$REDIS_DB" -c "$c" -n "$n" -r "$r" --csv \
    "$@" 2>"$tmp/rb.err" | tail -n 1 | awk -F'","' '{ print $(NF - 6) }'
}

# A script as the library embeds it: each "--@include NAME" line replaced by the file NAME beside
# it (cmake/embed_generate.cmake).
lua_script() {
  awk -v dir="$(dirname "$1")" '/^--@include [A-Za-z0-9_.]+$/ {
      f = dir "/" $2; while ((getline line < f) > 0) print line; close(f); next } { print }' "$1"
}

redis_ceiling() {
  local acquire_sha release_sha c n rate acq rel fences left k failed i
  acquire_sha=$(lua_script src/redis/scripts/acquire.lua | rcli -x script load)
  release_sha=$(lua_script src/redis/scripts/release.lua | rcli -x script load)
  local p="fencelock:{ceiling/__rand_int__}"
  # The attempt's lock value (owner + 16 hex digits, redis_backend.cpp) and its tombstone key;
  # no releases owed (ARGV[8] = 0); a release's tombstone lives max(ttl, 60 s), as fencelock's.
  local acquire=(evalsha "$acquire_sha" 7 "$p" "$p:fence" "$p:holder" "$p:queue" "$p:queue_exp"
    "$p:queue_wake" "$p:dead:$value" "$owner" "$ttl_ms" "$metadata" 0 "$(date +%s%3N)"
    "fencelock:wake:$owner" "$value" 0)
  local release=(evalsha "$release_sha" 6 "$p" "$p:holder" "$p:queue" "$p:queue_exp"
    "$p:queue_wake" "$p:dead:$value" "$owner" 1 "$value" $((ttl_ms > 60000 ? ttl_ms : 60000)))
  local method="redis-benchmark EVALSHA acquire.lua and release.lua, run separately, random keys;"
  method+=" cycles/s = 1 / (1/acquire_per_s + 1/release_per_s)"
  # Lock and holder keys [from, to) holding the attempt's value, as after acquire.lua.
  local fill="for i = tonumber(ARGV[4]), tonumber(ARGV[5]) - 1 do
      local k = string.format('fencelock:{ceiling/%012d}', i)
      redis.call('SET', k, ARGV[1], 'PX', ARGV[2])
      redis.call('SET', k .. ':holder', '1 ' .. ARGV[3], 'PX', ARGV[2])
    end
    return 1"
  for c in "${CLIENTS[@]}"; do
    say "redis, $c clients"
    rflush
    rate=$(rbench "$c" $((c * 50 > 10000 ? c * 50 : 10000)) 1000000000 "${acquire[@]}")
    [[ $rate =~ ^[0-9.]+$ ]] || die "redis-benchmark gave no rate: $(cat "$tmp/rb.err")"
    n=$(awk -v r="$rate" -v s="$seconds" 'BEGIN { n = int(r * s); print n < 1000 ? 1000 : n }')

    rflush
    failed=$(rfailed)
    acq=$(rbench "$c" "$n" 1000000000 "${acquire[@]}")
    fences=$(rcount 'fencelock:{ceiling/*}:fence')

    rflush
    k=$((8 * n))
    for ((i = 0; i < k; i += 50000)); do
      rcli eval "$fill" 0 "$value" 600000 "$metadata" "$i" $((i + 50000 < k ? i + 50000 : k)) >/dev/null
    done
    rel=$(rbench "$c" "$n" "$k" "${release[@]}")
    left=$(rcount 'fencelock:{ceiling/*}')
    rflush
    failed=$(($(rfailed) - failed))
    [[ $acq =~ ^[0-9.]+$ && $rel =~ ^[0-9.]+$ ]] ||
      die "redis-benchmark gave no rate: $(cat "$tmp/rb.err")"
    ((failed == 0)) || say "WARNING: $failed EVALSHA calls failed (INFO commandstats)"

    emit redis redis-benchmark "$c" \
      "$(awk -v a="$acq" -v r="$rel" 'BEGIN { printf "%.1f", 1 / (1 / a + 1 / r) }')" "$method" \
      "$(jq -nc --argjson a "$acq" --argjson r "$rel" --argjson n "$n" --argjson f "$failed" \
        --argjson g "$(awk -v x="$fences" -v n="$n" 'BEGIN { printf "%.4f", x / n }')" \
        --argjson d "$(awk -v k="$k" -v x="$left" -v n="$n" 'BEGIN { printf "%.4f", (k - x) / n }')" \
        '{acquire_per_s: $a, release_per_s: $r, requests: $n, granted_fraction: $g,
          released_fraction: $d, failed_calls: $f}')"
  done
}

# --- PostgreSQL --------------------------------------------------------------------------------

pg() { PGOPTIONS='-c client_min_messages=warning' psql -X -q -At -v ON_ERROR_STOP=1 "$FENCELOCK_PG_URI" "$@"; }
# A library statement for pgbench: comments dropped, $1..$9 replaced by the given variables.
pg_statement() {
  local file=$1 i=1 var sed_args=()
  shift
  for var in "$@"; do
    sed_args+=(-e "s/\\\$$i([^0-9]|\$)/:$var\\1/g")
    i=$((i + 1))
  done
  grep -v '^[[:space:]]*--' "$file" | sed -E "${sed_args[@]}"
  echo ';'
}

pg_ceiling() {
  local label=$1 script=$tmp/$1.sql drawn method c free j log tps n before after grants warnings
  echo '\set k :client_id + 7100000000' >"$script"
  if [[ $label == pg_advisory ]]; then
    drawn="SELECT (epoch << 40) + count FROM fencelock_advisory_live"
    # The count needs an epoch (a fencelock client raises it on its first grant; pgbench cannot).
    local epoch
    epoch=$(pg -f src/postgres/sql/advisory_epoch_raise.sql)
    [[ -z $epoch ]] || pg -c "$(grep -v '^--' src/postgres/sql/advisory_epoch_live.sql |
      sed "s/\$1::bigint/$epoch/")" >/dev/null
    pg_statement src/postgres/sql/advisory_try.sql k k owner ttl meta >>"$script"
    echo 'SELECT pg_advisory_unlock(:k::bigint);' >>"$script"
    method="pgbench -M extended: advisory_try.sql + pg_advisory_unlock, one key per client"
  else
    drawn="SELECT last_value FROM fencelock_tokens"
    pg_statement src/postgres/sql/lease_acquire.sql k owner ttl meta >>"$script"
    pg_statement src/postgres/sql/lease_release.sql k owner >>"$script"
    method="pgbench -M extended: lease_acquire.sql + lease_release.sql, one key per client"
  fi
  local bench=("$PGBENCH" -n -M extended -f "$script" -D "owner=$owner" -D "ttl=$ttl_ms"
    -D "meta=$metadata")
  for c in "${CLIENTS[@]}"; do
    free=$(pg -c "SELECT current_setting('max_connections')::int
      - current_setting('superuser_reserved_connections')::int
      - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend') + 1")
    if ((c > free)); then
      say "$label, $c clients: skipped: the server has $free connections left" \
        "(max_connections - superuser_reserved_connections - open ones)"
      continue
    fi
    say "$label, $c clients"
    j=$((c < 2 ? c : 2))
    log=$tmp/$label-$c.log
    # Warm-up: every client's row exists afterwards (updated, not inserted, from then on).
    "${bench[@]}" -c "$c" -j "$j" -t 1 "$FENCELOCK_PG_URI" >"$log" 2>&1 ||
      { say "$label, $c clients: warm-up failed: $(tail -n 3 "$log")"; continue; }
    before=$(pg -c "$drawn")
    if ! "${bench[@]}" -c "$c" -j "$j" -T "$seconds" "$FENCELOCK_PG_URI" >"$log" 2>&1; then
      say "$label, $c clients: pgbench failed: $(tail -n 3 "$log")"
      continue
    fi
    after=$(pg -c "$drawn")
    tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$log")
    n=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$log")
    warnings=$(grep -c WARNING "$log" || true)
    grants=$((after - before))
    if [[ $label == pg_lease ]]; then grants=$((grants - n)); fi
    ((warnings == 0)) || say "WARNING: $warnings server warnings, e.g. $(grep -m1 WARNING "$log")"
    emit "$label" pgbench "$c" "$tps" "$method" \
      "$(jq -nc --argjson n "$n" --argjson w "$warnings" \
        --argjson g "$(awk -v g="$grants" -v n="$n" 'BEGIN { printf "%.4f", n ? g / n : 0 }')" \
        '{transactions: $n, granted_fraction: $g, warnings: $w}')"
  done
}

cleanup() {
  if wants redis; then rcli flushdb >/dev/null 2>&1 || true; fi
  if wants pg_advisory || wants pg_lease; then  # the rows of the keys 7100000000 + client_id
    pg -c "DELETE FROM fencelock_leases WHERE name ~ '^71000[0-9]{5}\$'" \
      -c "DELETE FROM fencelock_advisory_holders WHERE key BETWEEN 7100000000 AND 7100099999" \
      >/dev/null 2>&1 || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

if wants redis; then redis_ceiling; fi
if wants pg_advisory || wants pg_lease; then
  pg -f src/postgres/sql/schema.sql  # what the library runs on first use (idempotent)
  if wants pg_advisory; then pg_ceiling pg_advisory; fi
  if wants pg_lease; then pg_ceiling pg_lease; fi
fi
say "wrote $out"
