#!/usr/bin/env bash
# Local servers for the demo and for trying fencelock by hand (the tests start their own).
#
#   scripts/servers.sh start    start what is not running yet (idempotent)
#   scripts/servers.sh stop     stop the servers this script started (found by their pidfiles)
#   scripts/servers.sh status   show each server; exit 3 if any is not running
#   scripts/servers.sh env      print export lines: eval "$(scripts/servers.sh env)"
#   scripts/servers.sh kill PORT  crash the server listening on PORT (SIGKILL; PostgreSQL: an
#                               immediate shutdown, which recovers from its WAL like a crash);
#                               `start` brings it back (fencelock torture --server-control)
#   scripts/servers.sh pause PORT / resume PORT  stop (SIGSTOP) / continue the Redis, etcd or
#                               PostgreSQL server on PORT (PostgreSQL: the postmaster and every
#                               backend): a silent server (torture minority-stall)
#   scripts/servers.sh fill PORT  write about 4 MB of junk keys to the Redis on PORT (memory
#                               pressure: with FENCELOCK_REDIS_MAXMEMORY and an evicting
#                               FENCELOCK_REDIS_POLICY the server evicts; torture evict)
#   scripts/servers.sh failover PORT [LAG]  PostgreSQL with a standby only: stall replication
#                               (SIGSTOP the primary's WAL senders) for LAG seconds (default 2)
#                               while the primary keeps committing (and, with
#                               FENCELOCK_PG_FAILOVER_MIN_DRAWS=N, until N fencing tokens were
#                               drawn in the stall, at most 4 x LAG more), crash the primary
#                               on PORT (SIGKILL of the postmaster and its children), promote the
#                               standby; the old primary stays down for good (stop, and remove
#                               the state directory, for a fresh pair) (torture failover)
#   scripts/servers.sh admin-delete KIND KEY  take lock KEY away behind its holder's back, as an
#                               operator would: KIND redis (DEL on every Redis), etcd (etcdctl
#                               del of NAME/'s keys), postgres-lease (DELETE of its row),
#                               postgres-advisory (pg_terminate_backend of the holding session)
#
# Redis: independent redis-server instances on 127.0.0.1, ports FENCELOCK_REDIS_PORTS (default
# "7101 7102 7103"), no persistence (FENCELOCK_REDIS_APPENDONLY=1: AOF with appendfsync always,
# the durability fencing across restarts needs), daemonized, state (pidfile, log, AOF) in
# FENCELOCK_STATE_DIR/redis-PORT (default state dir /tmp/fencelock-servers).
# PostgreSQL: one PostgreSQL 15 cluster in FENCELOCK_STATE_DIR/postgres (data/, postgres.log,
# Unix socket) on 127.0.0.1 port FENCELOCK_PG_PORT (default 7201), created by the first start with
# the role `fencelock` (password fencelock-test-pw) owning the database `fencelock`; stop keeps the
# data (remove the directory for a fresh cluster). No fsync, synchronous_commit off: for demos,
# not for data (FENCELOCK_PG_WAL_WRITER_DELAY=10s also makes the WAL writer lazy, so that a crash
# loses seconds of commits, as the torture's server-kill needs to test fencelock's own
# synchronous_commit; it applies when the server starts). As root,
# initdb and the server run as the OS user `postgres`. PostgreSQL 15 binaries come from
# FENCELOCK_PG_BINDIR (default /usr/lib/postgresql/15/bin). FENCELOCK_PG_STANDBY_PORT=PORT adds a
# streaming standby (pg_basebackup of the primary, in FENCELOCK_STATE_DIR/postgres-standby),
# asynchronous unless FENCELOCK_PG_SYNC=1 (synchronous_standby_names = '*'); `env` then names both
# hosts with target_session_attrs=read-write, so that clients follow a failover (and, for an
# asynchronous standby, allow_async_standby=true, which fencelock otherwise refuses).
# etcd: one 3-member etcd 3.4 cluster on 127.0.0.1, client ports FENCELOCK_ETCD_PORTS (default
# "7301 7302 7303"), peer ports those plus 10, member N's state (data/, etcd.log, etcd.pid) in
# FENCELOCK_STATE_DIR/etcd-N; stop keeps the data (remove the directories for a fresh cluster).
# FENCELOCK_SERVICES chooses which of them start, stop, status and env act on (default
# "redis postgres etcd"). A new kind of server adds NAME_start/_stop/_status/_env functions and
# its name to SERVICES.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

STATE_DIR=${FENCELOCK_STATE_DIR:-/tmp/fencelock-servers}
IFS=', ' read -r -a REDIS_PORTS <<<"${FENCELOCK_REDIS_PORTS:-7101 7102 7103}"
IFS=', ' read -r -a SERVICES <<<"${FENCELOCK_SERVICES:-redis postgres etcd}"

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
  local persistence=(--appendonly no)
  [[ ${FENCELOCK_REDIS_APPENDONLY:-0} == 1 ]] && persistence=(--appendonly yes --appendfsync always)
  # A small cache with an eviction policy, for the torture's evict fault.
  [[ -n ${FENCELOCK_REDIS_MAXMEMORY:-} ]] && persistence+=(--maxmemory "$FENCELOCK_REDIS_MAXMEMORY")
  [[ -n ${FENCELOCK_REDIS_POLICY:-} ]] && persistence+=(--maxmemory-policy "$FENCELOCK_REDIS_POLICY")
  redis-server --port "$port" --bind 127.0.0.1 --save "" "${persistence[@]}" --dir "$dir" \
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

# --- PostgreSQL --------------------------------------------------------------------------------

# Absolute, because pg_ctl runs from inside it and the server keeps the path in its config.
PG_DIR=$(realpath -m -- "$STATE_DIR/postgres")
PG_DATA=$PG_DIR/data
PG_PORT=${FENCELOCK_PG_PORT:-7201}
PG_BIN=${FENCELOCK_PG_BINDIR:-/usr/lib/postgresql/15/bin}
PG_USER=fencelock
PG_PASSWORD=fencelock-test-pw
PG_DATABASE=fencelock
PG_STANDBY_PORT=${FENCELOCK_PG_STANDBY_PORT:-}
PG_STANDBY_DIR=$PG_DIR-standby
PG_STANDBY_DATA=$PG_STANDBY_DIR/data
# Written by `failover`: the primary in PG_DIR was crashed and its standby promoted.
PG_FAILED_OVER=$PG_DIR/failed-over

# initdb, pg_ctl and postgres refuse to run as root: as root they run as the OS user `postgres`.
postgres_as_owner() {
  if [[ $(id -u) -eq 0 ]]; then
    (cd "$PG_DIR" && setpriv --reuid=postgres --regid=postgres --init-groups -- "$@")
  else
    (cd "$PG_DIR" && "$@")
  fi
}

# postmaster.pid: line 1 the postmaster's pid, line 4 its port.
postgres_pid() { sed -n 1p "$PG_DATA/postmaster.pid" 2>/dev/null || true; }
postgres_running_port() { sed -n 4p "$PG_DATA/postmaster.pid" 2>/dev/null || true; }
postgres_ours() { pid_matches "$(postgres_pid)" "$PG_DATA"; }
# The test role logs in over TCP with its password (so the server is ready and set up).
postgres_login() {
  [[ $(PGPASSWORD=$PG_PASSWORD PGCONNECT_TIMEOUT=2 PGSSLMODE=disable timeout 5 \
    psql -X -w -At -d "host=127.0.0.1 port=$PG_PORT user=$PG_USER dbname=$PG_DATABASE" \
    -c 'select 1' 2>/dev/null) == 1 ]]
}
postgres_up() { postgres_ours && postgres_login; }
# Something (not necessarily PostgreSQL) accepts TCP connections on the port.
postgres_port_taken() { timeout 2 bash -c ": </dev/tcp/127.0.0.1/$PG_PORT" 2>/dev/null; }
# As the superuser over the Unix socket (trusted, no password).
postgres_superuser_sql() {
  psql -X -w -q -At -v ON_ERROR_STOP=1 -h "$PG_DIR" -p "$PG_PORT" -U postgres -d postgres "$@"
}

postgres_init_cluster() {
  mkdir -p "$PG_DIR"
  if [[ $(id -u) -eq 0 ]]; then
    id postgres >/dev/null 2>&1 || die "no OS user 'postgres' to run initdb as: run scripts/deps.sh"
    command -v setpriv >/dev/null 2>&1 || die "setpriv (util-linux) not found"
    chown postgres:postgres "$PG_DIR"
  fi
  if ! postgres_as_owner "$PG_BIN/initdb" -D "$PG_DATA" -U postgres --auth-local=trust \
    --auth-host=scram-sha-256 -E UTF8 --locale=C --no-sync --no-instructions \
    >"$PG_DIR/initdb.log" 2>&1; then
    tail -n 5 "$PG_DIR/initdb.log" >&2 || true
    die "initdb of $PG_DATA failed (log: $PG_DIR/initdb.log)"
  fi
  cat >>"$PG_DATA/postgresql.conf" <<CONF

# Added by scripts/servers.sh: a throwaway local cluster (no crash safety) for demos.
listen_addresses = '127.0.0.1'
unix_socket_directories = '$PG_DIR'
fsync = off
synchronous_commit = off
full_page_writes = off
shared_buffers = 32MB
max_connections = 200
CONF
}

# Idempotent: creates the role and database if missing, (re)sets the role's password.
postgres_ensure_role_and_database() {
  postgres_superuser_sql -c "DO \$\$ BEGIN
      IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$PG_USER') THEN
        CREATE ROLE $PG_USER;
      END IF;
    END \$\$" -c "ALTER ROLE $PG_USER LOGIN PASSWORD '$PG_PASSWORD'" >/dev/null
  if [[ $(postgres_superuser_sql -c \
    "SELECT 1 FROM pg_database WHERE datname = '$PG_DATABASE'") != 1 ]]; then
    postgres_superuser_sql -c "CREATE DATABASE $PG_DATABASE OWNER $PG_USER" >/dev/null
  fi
}

postgres_standby_pid() { sed -n 1p "$PG_STANDBY_DATA/postmaster.pid" 2>/dev/null || true; }
postgres_standby_ours() { pid_matches "$(postgres_standby_pid)" "$PG_STANDBY_DATA"; }
postgres_standby_sql() {
  psql -X -w -q -At -v ON_ERROR_STOP=1 -h "$PG_DIR" -p "$PG_STANDBY_PORT" -U postgres -d postgres \
    "$@"
}
postgres_streaming() {
  [[ $(postgres_superuser_sql -c "SELECT count(*) FROM pg_stat_replication WHERE state = \
    'streaming'" 2>/dev/null) -ge 1 ]]
}
postgres_promoted() { [[ $(postgres_standby_sql -c "SELECT pg_is_in_recovery()" 2>/dev/null) == f ]]; }

# The standby of FENCELOCK_PG_STANDBY_PORT: a base backup of the primary (first start), started
# as a streaming replica; the primary's synchronous_standby_names follows FENCELOCK_PG_SYNC.
postgres_standby_start() {
  local names="''"
  [[ ${FENCELOCK_PG_SYNC:-0} == 1 ]] && names="'*'"
  postgres_superuser_sql -c "ALTER SYSTEM SET synchronous_standby_names = $names" \
    -c "SELECT pg_reload_conf()" >/dev/null
  if postgres_standby_ours; then
    echo "postgres standby 127.0.0.1:$PG_STANDBY_PORT already running (pid $(postgres_standby_pid))"
    return
  fi
  mkdir -p "$PG_STANDBY_DIR"
  [[ $(id -u) -eq 0 ]] && chown postgres:postgres "$PG_STANDBY_DIR"
  if [[ ! -f $PG_STANDBY_DATA/PG_VERSION ]]; then
    if ! postgres_as_owner "$PG_BIN/pg_basebackup" -h "$PG_DIR" -p "$PG_PORT" -U postgres \
      -D "$PG_STANDBY_DATA" -R -X stream -c fast --no-sync >"$PG_STANDBY_DIR/basebackup.log" 2>&1; then
      tail -n 5 "$PG_STANDBY_DIR/basebackup.log" >&2 || true
      die "pg_basebackup of the primary on port $PG_PORT failed"
    fi
    # Promoted, it has no standby of its own: it must not wait for one (it would refuse every
    # commit), whatever the primary's setting the backup copied.
    echo "synchronous_standby_names = ''" >>"$PG_STANDBY_DATA/postgresql.auto.conf"
  fi
  if ! postgres_as_owner "$PG_BIN/pg_ctl" -D "$PG_STANDBY_DATA" -l "$PG_STANDBY_DIR/postgres.log" \
    -o "-p $PG_STANDBY_PORT" -w -t 30 start >/dev/null; then
    tail -n 5 "$PG_STANDBY_DIR/postgres.log" >&2 || true
    die "the standby on port $PG_STANDBY_PORT did not start (log: $PG_STANDBY_DIR/postgres.log)"
  fi
  wait_until 300 postgres_streaming || die "the standby on port $PG_STANDBY_PORT does not stream"
  echo "postgres standby 127.0.0.1:$PG_STANDBY_PORT started (pid $(postgres_standby_pid)," \
    "$([[ $names == "'*'" ]] && echo synchronous || echo asynchronous))"
}

# Crashes the primary after LAG seconds of stalled replication and promotes the standby.
# The fencing tokens drawn so far: lease mode's sequence and advisory mode's count in its current
# epoch (0 before any draw).
postgres_tokens_drawn() {
  local lease advisory
  lease=$(psql -X -w -q -At -h "$PG_DIR" -p "$PG_PORT" -U postgres -d "$PG_DATABASE" -c \
    "SELECT coalesce(max(last_value), 0) FROM pg_sequences WHERE sequencename = 'fencelock_tokens'" \
    2>/dev/null) || lease=0
  # The table exists only once an advisory client or migrate made it.
  advisory=$(psql -X -w -q -At -h "$PG_DIR" -p "$PG_PORT" -U postgres -d "$PG_DATABASE" -c \
    "SELECT coalesce(sum(count), 0) FROM fencelock_advisory_live" 2>/dev/null) || advisory=0
  echo $((${lease:-0} + ${advisory:-0}))
}

postgres_failover() {
  local port=$1 lag=${2:-2} senders pid postmaster
  [[ $port == "$PG_PORT" ]] || die "failover: port $port is not the primary's ($PG_PORT)"
  [[ -n $PG_STANDBY_PORT ]] || die "failover needs a standby (FENCELOCK_PG_STANDBY_PORT)"
  postgres_ours || die "failover: the primary on port $PG_PORT is not running"
  postgres_standby_ours || die "failover: the standby on port $PG_STANDBY_PORT is not running"
  senders=$(postgres_superuser_sql -c "SELECT pid FROM pg_stat_replication")
  [[ -n $senders ]] || die "failover: the primary has no WAL sender"
  local drawn_before
  drawn_before=$(postgres_tokens_drawn)
  for pid in $senders; do kill -STOP "$pid"; done
  sleep "$lag"
  # FENCELOCK_PG_FAILOVER_MIN_DRAWS=N: the stall goes on until N fencing tokens were drawn in
  # it (at most 4 x LAG more: torture waits 60 s for this program), so that an asynchronous
  # standby surely lacks more of them than a sequence logs ahead (32): a count of grants, not a
  # time that a slow machine fills with fewer.
  local min_draws=${FENCELOCK_PG_FAILOVER_MIN_DRAWS:-0} waited=0
  while (($(postgres_tokens_drawn) - drawn_before < min_draws)) &&
    ((waited < ${lag%.*} * 40)); do
    sleep 0.1
    waited=$((waited + 1))
  done
  postmaster=$(postgres_pid)
  kill -KILL "$postmaster"
  pkill -KILL -P "$postmaster" || true
  # The stopped senders by pid too: once the postmaster is gone they belong to init, and
  # `pkill -P` no longer finds them (each run leaked one stopped sender before).
  for pid in $senders; do kill -KILL "$pid" 2>/dev/null || true; done
  wait_until 50 process_gone "$postmaster" || die "the primary's postmaster survived SIGKILL"
  touch "$PG_FAILED_OVER"
  postgres_as_owner "$PG_BIN/pg_ctl" -D "$PG_STANDBY_DATA" -w -t 30 promote >/dev/null ||
    die "the standby on port $PG_STANDBY_PORT was not promoted"
  wait_until 100 postgres_promoted || die "the standby on port $PG_STANDBY_PORT stays read-only"
  echo "postgres 127.0.0.1:$port crashed after ${lag}s of stalled replication;" \
    "standby 127.0.0.1:$PG_STANDBY_PORT promoted"
}

postgres_start() {
  [[ -x $PG_BIN/initdb && -x $PG_BIN/pg_ctl ]] ||
    die "PostgreSQL 15 not found in $PG_BIN: run scripts/deps.sh (or set FENCELOCK_PG_BINDIR)"
  command -v psql >/dev/null 2>&1 || die "psql not found: run scripts/deps.sh"
  [[ ! -e $PG_FAILED_OVER ]] ||
    die "the primary in $PG_DIR was failed over (its standby promoted): run '$0 stop' and" \
      "remove $STATE_DIR for a fresh pair"
  if postgres_up; then
    echo "postgres 127.0.0.1:$PG_PORT already running (pid $(postgres_pid))"
    return
  fi
  if postgres_ours; then
    if [[ $(postgres_running_port) != "$PG_PORT" ]]; then
      die "postgres pid $(postgres_pid) of $PG_DATA runs on port $(postgres_running_port)," \
        "not $PG_PORT; run '$0 stop' first"
    fi
    # Running on our port but the login fails: set the role up again below.
  else
    if postgres_port_taken; then
      die "port $PG_PORT is in use by a server not started by this script;" \
        "set FENCELOCK_PG_PORT to a free port"
    fi
    [[ -f $PG_DATA/PG_VERSION ]] || postgres_init_cluster
    if ! postgres_as_owner "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_DIR/postgres.log" \
      -o "-p $PG_PORT${FENCELOCK_PG_WAL_WRITER_DELAY:+ -c wal_writer_delay=$FENCELOCK_PG_WAL_WRITER_DELAY}" \
      -w -t 30 start >/dev/null; then
      tail -n 5 "$PG_DIR/postgres.log" >&2 || true
      die "postgres on port $PG_PORT did not start within 30 s (log: $PG_DIR/postgres.log)"
    fi
  fi
  postgres_ensure_role_and_database
  if ! wait_until 100 postgres_up; then
    tail -n 5 "$PG_DIR/postgres.log" >&2 || true
    die "postgres on port $PG_PORT does not accept the password login of $PG_USER" \
      "(log: $PG_DIR/postgres.log)"
  fi
  echo "postgres 127.0.0.1:$PG_PORT started (pid $(postgres_pid))"
  [[ -z $PG_STANDBY_PORT ]] || postgres_standby_start
}

postgres_stop() {
  local pid port
  pid=$(postgres_pid)
  port=$(postgres_running_port)
  if postgres_ours; then
    kill -CONT "$pid" 2>/dev/null || true # a paused server cannot shut down
    kill -INT "$pid"                      # fast shutdown: disconnect clients, checkpoint, exit
    if ! wait_until 300 process_gone "$pid"; then
      kill -KILL "$pid" 2>/dev/null || true
    fi
    echo "postgres 127.0.0.1:$port stopped (pid $pid)"
  fi
  if postgres_standby_ours; then
    pid=$(postgres_standby_pid)
    kill -INT "$pid"
    if ! wait_until 300 process_gone "$pid"; then
      kill -KILL "$pid" 2>/dev/null || true
    fi
    echo "postgres standby 127.0.0.1:$PG_STANDBY_PORT stopped (pid $pid)"
  fi
}

postgres_status() {
  if postgres_up; then
    echo "postgres 127.0.0.1:$PG_PORT running (pid $(postgres_pid))"
  elif postgres_ours; then
    echo "postgres 127.0.0.1:$(postgres_running_port) not accepting the login of $PG_USER" \
      "on port $PG_PORT (pid $(postgres_pid))"
    return 1
  else
    echo "postgres 127.0.0.1:$PG_PORT stopped$([[ -e $PG_FAILED_OVER ]] && echo ' (failed over)')"
    [[ -e $PG_FAILED_OVER ]] || return 1
  fi
  [[ -n $PG_STANDBY_PORT ]] || return 0
  if postgres_standby_ours; then
    echo "postgres standby 127.0.0.1:$PG_STANDBY_PORT running (pid $(postgres_standby_pid))"
  else
    echo "postgres standby 127.0.0.1:$PG_STANDBY_PORT stopped"
    return 1
  fi
}

postgres_env() {
  if [[ -n $PG_STANDBY_PORT ]]; then
    local hosts=127.0.0.1:$PG_PORT,127.0.0.1:$PG_STANDBY_PORT query=target_session_attrs=read-write
    # fencelock refuses an asynchronous standby by default: accepted here, visibly, for tests.
    [[ ${FENCELOCK_PG_SYNC:-0} == 1 ]] || query+="&allow_async_standby=true"
    echo "export FENCELOCK_PG_URI=postgres://$PG_USER:$PG_PASSWORD@$hosts/$PG_DATABASE?$query"
    return
  fi
  echo "export FENCELOCK_PG_URI=postgres://$PG_USER:$PG_PASSWORD@127.0.0.1:$PG_PORT/$PG_DATABASE"
}

# --- etcd --------------------------------------------------------------------------------------

IFS=', ' read -r -a ETCD_PORTS <<<"${FENCELOCK_ETCD_PORTS:-7301 7302 7303}"
ETCD_PEER_OFFSET=10

# Member N (1-based) serves clients on ETCD_PORTS[N-1] and peers on that port + ETCD_PEER_OFFSET.
etcd_dir() { realpath -m -- "$STATE_DIR/etcd-$1"; }
etcd_client_port() { echo "${ETCD_PORTS[$1 - 1]}"; }
etcd_peer_port() { echo $((${ETCD_PORTS[$1 - 1]} + ETCD_PEER_OFFSET)); }
etcd_pid() { cat "$(etcd_dir "$1")/etcd.pid" 2>/dev/null || true; }
etcd_ours() { pid_matches "$(etcd_pid "$1")" "--data-dir $(etcd_dir "$1")/data"; }
# Needs an elected leader, so a member alone (its peers down) is not healthy. A paused member
# accepts the connection but never answers: hence the timeouts.
etcd_healthy() {
  ETCDCTL_API=3 timeout 5 etcdctl --endpoints="127.0.0.1:$(etcd_client_port "$1")" \
    --dial-timeout=1s --command-timeout=2s endpoint health >/dev/null 2>&1
}
etcd_up() { etcd_ours "$1" && etcd_healthy "$1"; }
etcd_all_up() {
  local n
  for ((n = 1; n <= ${#ETCD_PORTS[@]}; n++)); do etcd_up "$n" || return 1; done
}
# By the clock, not by tries: one try can take seconds.
etcd_wait_all_up() {
  local deadline=$((SECONDS + $1))
  while ((SECONDS < deadline)); do
    etcd_all_up && return 0
    sleep 0.2
  done
  return 1
}
port_in_use() { timeout 2 bash -c ": </dev/tcp/127.0.0.1/$1" 2>/dev/null; }
etcd_initial_cluster() {
  local n cluster=""
  for ((n = 1; n <= ${#ETCD_PORTS[@]}; n++)); do
    cluster+="${cluster:+,}m$n=http://127.0.0.1:$(etcd_peer_port "$n")"
  done
  echo "$cluster"
}

# Refuses ports taken by others and data made for other ports, before any member starts.
etcd_check_one() {
  local n=$1 dir client peer cluster
  etcd_ours "$n" && return
  dir=$(etcd_dir "$n")
  client=$(etcd_client_port "$n")
  peer=$(etcd_peer_port "$n")
  cluster=$(etcd_initial_cluster)
  if port_in_use "$client" || port_in_use "$peer"; then
    die "port $client or $peer is in use by a server not started by this script;" \
      "set FENCELOCK_ETCD_PORTS to free ports"
  fi
  # A member's data remembers its peers' URLs: other ports need a fresh data directory.
  if [[ -e $dir/initial-cluster && $(<"$dir/initial-cluster") != "$cluster" ]]; then
    die "$dir holds a member of the cluster $(<"$dir/initial-cluster"), not $cluster;" \
      "run '$0 stop' and remove $STATE_DIR/etcd-* for a fresh cluster"
  fi
}

etcd_start_one() {
  local n=$1 dir client peer cluster
  dir=$(etcd_dir "$n")
  client=$(etcd_client_port "$n")
  peer=$(etcd_peer_port "$n")
  cluster=$(etcd_initial_cluster)
  if etcd_ours "$n"; then
    echo "etcd m$n 127.0.0.1:$client already running (pid $(etcd_pid "$n"))"
    return
  fi
  mkdir -p "$dir"
  echo "$cluster" >"$dir/initial-cluster"
  rm -f "$dir/etcd.pid"
  # etcd does not daemonize: setsid detaches it from this shell's session and terminal.
  setsid etcd --name "m$n" --data-dir "$dir/data" \
    --listen-client-urls "http://127.0.0.1:$client" \
    --advertise-client-urls "http://127.0.0.1:$client" \
    --listen-peer-urls "http://127.0.0.1:$peer" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "$cluster" --initial-cluster-token fencelock-servers-sh \
    --initial-cluster-state new --heartbeat-interval 50 --election-timeout 500 \
    --logger zap --log-outputs stderr </dev/null >>"$dir/etcd.log" 2>&1 &
  echo $! >"$dir/etcd.pid"
  echo "etcd m$n 127.0.0.1:$client starting (pid $!)"
}

etcd_start() {
  command -v etcd >/dev/null 2>&1 || die "etcd not found: run scripts/deps.sh"
  command -v etcdctl >/dev/null 2>&1 || die "etcdctl not found: run scripts/deps.sh"
  local n
  for ((n = 1; n <= ${#ETCD_PORTS[@]}; n++)); do etcd_check_one "$n"; done
  # All members first: none becomes healthy before a majority runs.
  for ((n = 1; n <= ${#ETCD_PORTS[@]}; n++)); do etcd_start_one "$n"; done
  if ! etcd_wait_all_up 30; then
    for ((n = 1; n <= ${#ETCD_PORTS[@]}; n++)); do
      etcd_up "$n" || tail -n 5 "$(etcd_dir "$n")/etcd.log" >&2 || true
    done
    die "etcd cluster on ports ${ETCD_PORTS[*]} did not become healthy within 30 s" \
      "(logs: $STATE_DIR/etcd-*/etcd.log)"
  fi
  echo "etcd cluster on ports ${ETCD_PORTS[*]} healthy"
}

etcd_stop() {
  local pidfile dir pid
  for pidfile in "$STATE_DIR"/etcd-*/etcd.pid; do
    [[ -e $pidfile ]] || continue
    dir=$(realpath -m -- "$(dirname "$pidfile")")
    pid=$(cat "$pidfile")
    if pid_matches "$pid" "--data-dir $dir/data"; then
      kill -CONT "$pid" 2>/dev/null || true # a paused member cannot handle SIGTERM
      kill -TERM "$pid"
      if ! wait_until 50 process_gone "$pid"; then
        kill -KILL "$pid" 2>/dev/null || true
      fi
      echo "etcd m${dir##*/etcd-} stopped (pid $pid)"
    fi
    rm -f "$pidfile"
  done
}

etcd_status() {
  local n client all_up=0
  for ((n = 1; n <= ${#ETCD_PORTS[@]}; n++)); do
    client=$(etcd_client_port "$n")
    if etcd_up "$n"; then
      echo "etcd m$n 127.0.0.1:$client running (pid $(etcd_pid "$n"))"
    elif etcd_ours "$n"; then
      echo "etcd m$n 127.0.0.1:$client not healthy (pid $(etcd_pid "$n"))"
      all_up=1
    else
      echo "etcd m$n 127.0.0.1:$client stopped"
      all_up=1
    fi
  done
  return "$all_up"
}

# True when the local etcd is a version fencelock refuses by default: a stalled former leader can
# revoke live leases (etcd-io/etcd#15247; fixed in 3.4.31 and 3.5.13). Debian 12 ships 3.4.23.
etcd_revokes_after_stall() {
  local version major minor patch
  version=$(etcd --version 2>/dev/null | sed -n 's/^etcd Version: *//p')
  IFS=. read -r major minor patch <<<"${version%%[-+]*}"
  [[ $major =~ ^[0-9]+$ && $minor =~ ^[0-9]+$ && $patch =~ ^[0-9]+$ ]] || return 1
  ((major < 3)) && return 0
  ((major > 3)) && return 1
  ((minor < 4)) || ((minor == 4 && patch < 31)) || ((minor == 5 && patch < 13))
}

etcd_env() {
  local hosts option=""
  hosts=$(printf '127.0.0.1:%s,' "${ETCD_PORTS[@]}")
  # The local servers are for development and tests: accept the known defect there, visibly.
  etcd_revokes_after_stall && option="?allow_stale_leader_revoke=true"
  echo "export FENCELOCK_ETCD_URI=etcd://${hosts%,}$option"
}

# --- dispatch ----------------------------------------------------------------------------------

kill_port() {
  local port=$1 pid="" n p
  for p in "${REDIS_PORTS[@]}"; do
    if [[ $p == "$port" ]] && redis_ours "$port"; then pid=$(redis_pid "$port"); fi
  done
  for ((n = 1; n <= ${#ETCD_PORTS[@]}; n++)); do
    if [[ $(etcd_client_port "$n") == "$port" ]] && etcd_ours "$n"; then pid=$(etcd_pid "$n"); fi
  done
  if [[ $port == "$PG_PORT" ]] && postgres_ours; then
    postgres_as_owner "$PG_BIN/pg_ctl" -D "$PG_DATA" -m immediate stop >/dev/null
    echo "postgres 127.0.0.1:$port crashed (immediate shutdown)"
    return
  fi
  [[ -n $pid ]] || die "no running server of ours listens on port $port"
  kill -KILL "$pid"
  wait_until 50 process_gone "$pid" || die "pid $pid on port $port survived SIGKILL"
  echo "server on 127.0.0.1:$port killed (pid $pid)"
}

# The pid of the Redis or etcd server of ours on PORT ("" if none).
server_pid_on() {
  local port=$1 n p
  for p in "${REDIS_PORTS[@]}"; do
    if [[ $p == "$port" ]] && redis_ours "$port"; then redis_pid "$port"; fi
  done
  for ((n = 1; n <= ${#ETCD_PORTS[@]}; n++)); do
    if [[ $(etcd_client_port "$n") == "$port" ]] && etcd_ours "$n"; then etcd_pid "$n"; fi
  done
}

signal_port() {
  local signal=$1 port=$2 pid
  if [[ $port == "$PG_PORT" ]] && postgres_ours; then
    # PostgreSQL is a process per session: the whole server stops or continues (the postmaster
    # and every backend), so that nothing answers, as with a stalled machine.
    pid=$(postgres_pid)
    kill "-$signal" "$pid"
    pkill "-$signal" -P "$pid" || true
    echo "postgres on 127.0.0.1:$port sent SIG$signal (postmaster $pid and its children)"
    return
  fi
  pid=$(server_pid_on "$port")
  [[ -n $pid ]] || die "no running Redis, etcd or PostgreSQL server of ours listens on port $port"
  kill "-$signal" "$pid"
  echo "server on 127.0.0.1:$port sent SIG$signal (pid $pid)"
}

admin_delete() {
  local kind=$1 key=$2 port endpoints
  case $kind in
    redis)
      for port in "${REDIS_PORTS[@]}"; do
        echo "redis 127.0.0.1:$port DEL fencelock:{$key}:" \
          "$(redis-cli -h 127.0.0.1 -p "$port" DEL "fencelock:{$key}" 2>&1)"
      done
      ;;
    etcd)
      endpoints=$(printf '127.0.0.1:%s,' "${ETCD_PORTS[@]}")
      # Only NAME/<hex> keys: those of nested locks (NAME/x/<hex>) are not this lock's.
      local k deleted=0
      while IFS= read -r k; do
        [[ $k =~ ^.*/[0-9a-f]{1,16}$ && ${k%/*} == "$key" ]] || continue
        ETCDCTL_API=3 etcdctl --endpoints "${endpoints%,}" del "$k" >/dev/null
        deleted=$((deleted + 1))
      done < <(ETCDCTL_API=3 etcdctl --endpoints "${endpoints%,}" get --prefix --keys-only "$key/")
      echo "etcd: deleted $deleted key(s) of lock $key"
      ;;
    postgres-lease)
      echo "postgres: $(postgres_superuser_sql -d "$PG_DATABASE" -v key="$key" \
        <<<"DELETE FROM fencelock_leases WHERE name = :'key' RETURNING 'deleted row of ' || name")"
      ;;
    postgres-advisory)
      echo "postgres: terminated $(postgres_superuser_sql -d "$PG_DATABASE" -v key="$key" \
        <<<"SELECT count(pg_terminate_backend(h.pid)) FROM fencelock_advisory_holders h
             WHERE h.name = :'key' AND EXISTS (SELECT 1 FROM pg_locks l
               WHERE l.locktype = 'advisory' AND l.granted AND l.pid = h.pid)") session(s)"
      ;;
    *) die "admin-delete: unknown kind '$kind' (redis, etcd, postgres-lease, postgres-advisory)" ;;
  esac
}

main() {
  local action=${1:-}
  case $action in
    kill)
      [[ $# -eq 2 ]] || die "usage: $0 kill PORT"
      kill_port "$2"
      ;;
    pause | resume)
      [[ $# -eq 2 ]] || die "usage: $0 $action PORT"
      signal_port "$([[ $action == pause ]] && echo STOP || echo CONT)" "$2"
      ;;
    fill)
      [[ $# -eq 2 ]] || die "usage: $0 fill PORT"
      # pcall: a noeviction server answers OOM once full, which is the point, not a failure.
      echo "redis 127.0.0.1:$2 fill: $(redis-cli -h 127.0.0.1 -p "$2" EVAL "
        local ok = 0
        for i = 1, 4000 do
          if not redis.pcall('SET', 'junk:' .. ARGV[1] .. ':' .. i, string.rep('x', 1000)).err
          then ok = ok + 1 end
        end
        return ok" 0 "$RANDOM$RANDOM") keys written"
      ;;
    failover)
      [[ $# -eq 2 || $# -eq 3 ]] || die "usage: $0 failover PORT [LAG_SECONDS]"
      postgres_failover "$2" "${3:-2}"
      ;;
    admin-delete)
      [[ $# -eq 3 ]] || die "usage: $0 admin-delete KIND KEY"
      admin_delete "$2" "$3"
      ;;
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
      echo "usage: $0 start|stop|status|env|kill PORT|pause PORT|resume PORT|fill PORT|failover PORT [LAG]|admin-delete KIND KEY" >&2
      exit 2
      ;;
  esac
}

main "$@"
