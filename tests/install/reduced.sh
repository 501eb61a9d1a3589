#!/usr/bin/env bash
# A fencelock built with only the Redis backend (-DFENCELOCK_WITH_ETCD=OFF
# -DFENCELOCK_WITH_POSTGRES=OFF; tests, benchmarks and so the command line tool left out): it
# configures and builds without gRPC, protobuf or libpq, installs, and its consumers (tests/
# install/run.sh) take a lock on Redis and get "unknown backend scheme" for etcd:// and
# postgres://; nothing in the installed package names gRPC or protobuf.
#
#   tests/install/reduced.sh SOURCE_DIR [CXX]
set -euo pipefail

source_dir=$(cd "$1" && pwd)
cxx=${2:-c++}
build=$(mktemp -d /tmp/fencelock-reduced-build-XXXXXX)
trap 'rm -rf "$build"' EXIT

# Debug without debug information: the quickest compile; this build is for what it links, not
# for speed.
cmake -S "$source_dir" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG= \
  -DCMAKE_CXX_COMPILER="$cxx" \
  -DFENCELOCK_WITH_ETCD=OFF -DFENCELOCK_WITH_POSTGRES=OFF -DFENCELOCK_BUILD_TESTS=OFF \
  -DFENCELOCK_BUILD_BENCH=OFF >"$build/configure.log" || { cat "$build/configure.log"; exit 1; }
if grep -v -e "^//" -e "^FENCELOCK_" "$build/CMakeCache.txt" | grep -qiE 'grpc|protobuf|libpq'; then
  echo "reduced build: the configuration looked for gRPC, protobuf or libpq" >&2
  grep -iE 'grpc|protobuf|libpq' "$build/CMakeCache.txt" | head -5 >&2
  exit 1
fi
cmake --build "$build" -j "${FENCELOCK_JOBS:-2}" >"$build/build.log" || { tail -50 "$build/build.log"; exit 1; }
bash "$source_dir/tests/install/run.sh" "$build" "$cxx" --without-grpc \
  --refused etcd://127.0.0.1:2379 --refused postgres://u@127.0.0.1/d
