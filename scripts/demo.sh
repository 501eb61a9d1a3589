#!/usr/bin/env bash
# fencelock demo (under a minute once built): installs what is missing, builds, starts the local
# servers (scripts/servers.sh: three redis-server instances, PostgreSQL, etcd), then
#  1. `fencelock demo`: on every backend a holder is paused past its TTL between its read and its
#     write, another worker takes the lock with a larger token, and the paused one's stale write
#     is refused by the fence;
#  2. `fencelock run` serializing a read-sleep-write counter update across processes over Redlock,
#     next to the same race without a lock.
# The servers are left running at the end.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

WORKERS=5
FENCELOCK=build/fencelock

# The critical section each worker runs: read the counter, think, write it back incremented, then
# log the fencing token it was given. Without mutual exclusion the updates get lost.
# Arguments: $1 counter file, $2 log file, $3 worker number.
# shellcheck disable=SC2016 # expanded by the worker's sh, not here
CRITICAL='n=$(cat "$1"); sleep 0.2; echo $((n + 1)) >"$1"; echo "token ${FENCELOCK_TOKEN:--} worker $3" >>"$2"'

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# race DIR [PREFIX...]: runs WORKERS copies of CRITICAL at once, each as `PREFIX... sh -c ...`.
race() {
  local dir=$1 i pid failed=0
  shift
  mkdir -p "$dir"
  echo 0 >"$dir/counter"
  : >"$dir/log"
  local pids=()
  for ((i = 1; i <= WORKERS; i++)); do
    "$@" sh -c "$CRITICAL" sh "$dir/counter" "$dir/log" "$i" &
    pids+=("$!")
  done
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  return "$failed"
}

# check DIR: prints the counter and the tokens; fails unless the counter is exact and the tokens
# strictly increase in the order the critical sections ran.
check() {
  local dir=$1 counter
  counter=$(cat "$dir/counter")
  sed 's/^/   /' "$dir/log"
  if [[ $counter -ne $WORKERS ]]; then
    echo "   counter = $counter, expected $WORKERS: FAILED" >&2
    return 1
  fi
  if ! awk 'NR > 1 && $2 <= prev { bad = 1 } { prev = $2 } END { exit bad }' "$dir/log"; then
    echo "   tokens do not strictly increase: FAILED" >&2
    return 1
  fi
  echo "   counter = $counter (exact) and the tokens strictly increase: OK"
}

# locked_race NAME URI: the race with every worker under `fencelock run` on one key.
locked_race() {
  local name=$1 uri=$2 key="demo:$1-counter" shown
  shown=$(sed -E 's#://([^:/@]*):[^@]*@#://\1@#' <<<"$uri")  # never print a password
  say "$WORKERS workers under 'fencelock run --backend $shown $key'"
  race "$work_dir/$name" "$FENCELOCK" run --backend "$uri" --ttl 10s --wait 30s "$key" -- &
  local race_pid=$!
  sleep 0.3
  echo "   while they run, 'fencelock status $key' says:"
  "$FENCELOCK" status --backend "$uri" "$key" | sed 's/^/     /' || true
  wait "$race_pid"
  check "$work_dir/$name"
}

shell_demo() {
  work_dir=$(mktemp -d "${TMPDIR:-/tmp}/fencelock-demo-XXXXXX")
  trap 'rm -rf "$work_dir"' EXIT

  say "$WORKERS workers without a lock (each does: read counter, sleep 0.2 s, write counter + 1)"
  race "$work_dir/unlocked"
  echo "   counter = $(cat "$work_dir/unlocked/counter"), expected $WORKERS: updates were lost"

  locked_race redlock "$FENCELOCK_REDLOCK_URI"

  say "'fencelock list --backend $FENCELOCK_REDLOCK_URI' after the runs (every lock released):"
  "$FENCELOCK" list --backend "$FENCELOCK_REDLOCK_URI" | sed 's/^/   /'
}

main() {
  say "Dependencies, build, local servers"
  ./scripts/deps.sh
  local build_log
  build_log=$(mktemp "${TMPDIR:-/tmp}/fencelock-demo-build-XXXXXX")
  if ! ./scripts/build.sh >"$build_log" 2>&1; then
    cat "$build_log" >&2
    rm -f "$build_log"
    echo "demo.sh: the build failed" >&2
    exit 1
  fi
  rm -f "$build_log"
  echo "build: $FENCELOCK is up to date"
  ./scripts/servers.sh start
  eval "$(./scripts/servers.sh env)"

  say "fencelock demo: a paused holder against the fence, on every backend"
  "$FENCELOCK" demo
  shell_demo

  say "Done. The local servers are still running (scripts/servers.sh status);"
  echo "   use them with: eval \"\$(scripts/servers.sh env)\""
  echo "   stop them with: scripts/servers.sh stop"
}

main "$@"
