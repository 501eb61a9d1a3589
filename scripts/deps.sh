#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages fencelock needs to build, test and demo. Idempotent: only
# packages that dpkg-query does not report as installed are installed, and `apt-get update` runs
# only when something is missing.
# Runs apt-get directly as root, else through sudo. Add packages to PACKAGES below.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# One package a line, grouped by purpose; later backends append their groups here.
PACKAGES=(
  # toolchain
  build-essential g++ cmake ninja-build pkg-config
  # libraries
  libhiredis-dev libfmt-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  # standalone Asio, for the optional header fencelock/asio.h (its test and example)
  libasio-dev
  # servers for tests and the demo
  redis-server redis-tools
  # PostgreSQL backend: libpq for the client, PostgreSQL 15 server and psql for tests and the demo
  libpq-dev postgresql postgresql-client
  # PgBouncer in front of the test server (tests/support/pgbouncer.h): transaction and session
  # pooling (tests/conformance/postgres_pooler_test.cpp)
  pgbouncer
  # etcd backend: gRPC/protobuf code generation and libraries, etcd 3.4 server and etcdctl
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  etcd-server etcd-client
  # test certificates for the etcd TLS tests; clock faults of `fencelock torture`; etcd's
  # /metrics for the stream tests and the held benchmark
  openssl faketime curl
  # quality gates: formatting (scripts/check-format.sh); clang 14 for ThreadSanitizer and the
  # thread-safety analysis (scripts/test.sh --tsan), libFuzzer (scripts/fuzz.sh; the runtime is
  # in libclang-rt-14-dev) and the compile database of clang-tidy 14 (scripts/check-tidy.sh)
  clang-format clang-14 libclang-rt-14-dev clang-tidy
  # model checking of the protocols (scripts/model-check.sh, models/*.pml)
  spin
)

missing_packages() {
  local pkg
  for pkg in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q '^install ok installed$'; then
      printf '%s\n' "$pkg"
    fi
  done
}

as_root() {
  if [[ $(id -u) -eq 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    echo "deps.sh: need root or sudo to run: $*" >&2
    exit 1
  fi
}

main() {
  if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "deps.sh: not a Debian-based system; install by hand: ${PACKAGES[*]}" >&2
    exit 1
  fi
  local missing
  mapfile -t missing < <(missing_packages)
  if [[ ${#missing[@]} -eq 0 ]]; then
    echo "deps.sh: all ${#PACKAGES[@]} packages present"
    return
  fi
  echo "deps.sh: installing ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
  echo "deps.sh: done"
}

main "$@"
