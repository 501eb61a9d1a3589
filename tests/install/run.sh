#!/usr/bin/env bash
# Install test: `cmake --install` of BUILD_DIR into a temporary prefix, then a program outside
# the tree (tests/install/consumer) built twice against it, with find_package(fencelock) and with
# pkg-config, and each run against a redis-server started here on a free loopback port.
#
#   tests/install/run.sh BUILD_DIR [CXX] [--refused URI]... [--without-grpc]
# --refused URI: the consumers must get "unknown backend scheme" for URI (a backend left out of
# the build, tests/install/reduced.sh); --without-grpc: the installed package must not link or
# mention gRPC or protobuf.
set -euo pipefail

build_dir=$(cd "$1" && pwd)
cxx=${2:-c++}
shift $(($# < 2 ? $# : 2))
refused=()
without_grpc=0
while (($#)); do
  case $1 in
    --refused) refused+=("$2"); shift 2 ;;
    --without-grpc) without_grpc=1; shift ;;
    *) echo "install test: unknown option $1" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d /tmp/fencelock-install-test-XXXXXX)
redis_pid=
cleanup() {
  if [[ -n $redis_pid ]]; then kill "$redis_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

cmake --install "$build_dir" --prefix "$work/prefix" >"$work/install.log"
test -f "$work/prefix/include/fencelock/client.h"

# With find_package.
cmake -S "$here/consumer" -B "$work/cmake-build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/configure.log"
cmake --build "$work/cmake-build" >"$work/build.log"

# With pkg-config.
pc_dir=$(dirname "$(find "$work/prefix" -name fencelock.pc | head -n 1)")
read -r -a flags < <(PKG_CONFIG_PATH=$pc_dir pkg-config --cflags --libs fencelock)
"$cxx" -std=c++20 "$here/consumer/main.cpp" -o "$work/consumer-pc" "${flags[@]}"

if ((without_grpc)); then
  if grep -rqiE 'grpc|protobuf' "$pc_dir/fencelock.pc" "$work/prefix/lib"*/cmake/fencelock/*.cmake; then
    echo "install test: the package still names gRPC or protobuf" >&2; exit 1
  fi
  if ls "$work/prefix/lib"*/ | grep -q etcd_proto; then
    echo "install test: libfencelock_etcd_proto was installed" >&2; exit 1
  fi
  if nm -C "$work/prefix/lib"*/libfencelock.a 2>/dev/null | grep -qE ' U (grpc|google::protobuf)::'; then
    echo "install test: libfencelock refers to gRPC or protobuf symbols" >&2; exit 1
  fi
  echo "install test: no gRPC or protobuf in the package"
fi

# A redis-server on a free loopback port (a port taken by someone else makes it exit: next one).
for _ in $(seq 20); do
  port=$(shuf -i 20000-60000 -n 1)
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$work" >"$work/redis.log" 2>&1 &
  redis_pid=$!
  for _ in $(seq 50); do
    if redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; then break 2; fi
    kill -0 "$redis_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill "$redis_pid" 2>/dev/null || true
  redis_pid=
done
[[ -n $redis_pid ]] || { echo "install test: no redis-server started" >&2; exit 1; }

for consumer in "$work/cmake-build/consumer" "$work/consumer-pc"; do
  out=$("$consumer" "redis://127.0.0.1:$port")
  [[ $out =~ ^token\ [1-9][0-9]*$ ]] || { echo "install test: $consumer printed '$out'" >&2; exit 1; }
  echo "install test: $(basename "$consumer"): $out"
  for uri in "${refused[@]}"; do
    out=$("$consumer" --refused "$uri")
    [[ $out == refused ]] || { echo "install test: $consumer took $uri" >&2; exit 1; }
    echo "install test: $(basename "$consumer"): $uri refused"
  done
done
