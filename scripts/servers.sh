#!/usr/bin/env bash
# Local servers for the demo and for trying fencelock by hand (the tests start their own).
#
#   scripts/servers.sh start    start what is not running yet (idempotent)
#   scripts/servers.sh stop     stop the servers this script started (found by their pidfiles)
#   scripts/servers.sh status   show each server; exit 3 if any is not running
#   scripts/servers.sh env      print export lines: eval "$(scripts/servers.sh env)"
#
# Redis: independent redis-server instances on 127.0.0.1, ports FENCELOCK_REDIS_PORTS (default
# "7101 7102 7103"), no persistence, daemonized, state (pidfile, log) in
# FENCELOCK_STATE_DIR/redis-PORT (default state dir /tmp/fencelock-servers).
# A new kind of server (PostgreSQL, etcd) adds NAME_start/_stop/_status/_env functions and its
# name to SERVICES.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

STATE_DIR=${FENCELOCK_STATE_DIR:-/tmp/fencelock-servers}
IFS=', ' read -r -a REDIS_PORTS <<<"${FENCELOCK_REDIS_PORTS:-7101 7102 7103}"
SERVICES=(redis)

die() {
  echo "servers.sh: $*" >&2
  exit 1
}

# True if pid is alive and its command line contains the given text (guards against pid reuse).
pid_matches() {
  local pid=$1 text=$2 cmdline
  if [[ -z $pid ]] || ! kill -0 "$pid" 2>/dev/null; then return 1; fi
  cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ $cmdline == *"$text"* ]]
}

process_gone() { ! kill -0 "$1" 2>/dev/null; }

# Waits up to $2 tenths of a second for command $1... to succeed.
wait_until() {
  local tenths=$1
  shift
  local i
  for ((i = 0; i < tenths; i++)); do
    "$@" && return 0
    sleep 0.1
  done
  return 1
}

# --- Redis -------------------------------------------------------------------------------------

redis_dir() { echo "$STATE_DIR/redis-$1"; }
redis_pid() { cat "$(redis_dir "$1")/redis.pid" 2>/dev/null || true; }
# A paused server accepts the connection but never answers: hence the timeout.
redis_ping() { [[ $(timeout 2 redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null) == PONG ]]; }
redis_ours() { pid_matches "$(redis_pid "$1")" "redis-server"; }
redis_up() { redis_ours "$1" && redis_ping "$1"; }

redis_start_one() {
  local port=$1 dir
  dir=$(redis_dir "$port")
  if redis_up "$port"; then
    echo "redis 127.0.0.1:$port already running (pid $(redis_pid "$port"))"
    return
  fi
  if redis_ours "$port"; then
    die "redis-server pid $(redis_pid "$port") on port $port is alive but not answering PING" \
      "(paused?); run '$0 stop' first"
  fi
  if redis_ping "$port"; then
    die "port $port answers PING but its server was not started by this script;" \
      "set FENCELOCK_REDIS_PORTS to free ports"
  fi
  mkdir -p "$dir"
  rm -f "$dir/redis.pid"
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
    --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --protected-mode no
  if ! wait_until 100 redis_up "$port"; then
    tail -n 5 "$dir/redis.log" >&2 || true
    die "redis-server on port $port did not come up within 10 s (log: $dir/redis.log)"
  fi
  echo "redis 127.0.0.1:$port started (pid $(redis_pid "$port"))"
}

redis_start() {
  command -v redis-server >/dev/null 2>&1 || die "redis-server not found: run scripts/deps.sh"
  command -v redis-cli >/dev/null 2>&1 || die "redis-cli not found: run scripts/deps.sh"
  local port
  for port in "${REDIS_PORTS[@]}"; do redis_start_one "$port"; done
}

redis_stop() {
  local pidfile dir port pid
  for pidfile in "$STATE_DIR"/redis-*/redis.pid; do
    [[ -e $pidfile ]] || continue
    dir=$(dirname "$pidfile")
    port=${dir##*/redis-}
    pid=$(cat "$pidfile")
    if pid_matches "$pid" "redis-server"; then
      kill -CONT "$pid" 2>/dev/null || true # a paused server cannot handle SIGTERM
      kill -TERM "$pid"
      if ! wait_until 50 process_gone "$pid"; then
        kill -KILL "$pid" 2>/dev/null || true
      fi
      echo "redis 127.0.0.1:$port stopped (pid $pid)"
    fi
    rm -f "$pidfile"
  done
}

redis_status() {
  local port all_up=0
  for port in "${REDIS_PORTS[@]}"; do
    if redis_up "$port"; then
      echo "redis 127.0.0.1:$port running (pid $(redis_pid "$port"))"
    elif redis_ours "$port"; then
      echo "redis 127.0.0.1:$port not answering (pid $(redis_pid "$port"))"
      all_up=1
    else
      echo "redis 127.0.0.1:$port stopped"
      all_up=1
    fi
  done
  return "$all_up"
}

redis_env() {
  local hosts
  hosts=$(printf '127.0.0.1:%s,' "${REDIS_PORTS[@]}")
  echo "export FENCELOCK_REDIS_URI=redis://127.0.0.1:${REDIS_PORTS[0]}"
  echo "export FENCELOCK_REDLOCK_URI=redlock://${hosts%,}"
}

# --- dispatch ----------------------------------------------------------------------------------

main() {
  local action=${1:-}
  case $action in
    start | stop | env)
      local service
      for service in "${SERVICES[@]}"; do "${service}_${action}"; done
      ;;
    status)
      local service failed=0
      for service in "${SERVICES[@]}"; do "${service}_status" || failed=1; done
      [[ $failed -eq 0 ]] || exit 3
      ;;
    *)
      echo "usage: $0 start|stop|status|env" >&2
      exit 2
      ;;
  esac
}

main "$@"
