#!/usr/bin/env bash
# Configures and builds fencelock with CMake + Ninja, warnings as errors.
#
#   scripts/build.sh              -> build/       (RelWithDebInfo, everything)
#   scripts/build.sh --sanitize   -> build-asan/  (Debug, AddressSanitizer + UBSan, no benchmarks)
#
# FENCELOCK_JOBS sets the build parallelism (default 2).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

usage() {
  echo "usage: $0 [--sanitize]" >&2
  exit 2
}

build_dir=build
cmake_args=(-G Ninja -DFENCELOCK_WERROR=ON -DFENCELOCK_BUILD_TESTS=ON -DFENCELOCK_BUILD_BENCH=ON)
case ${1:-} in
  "") ;;
  --sanitize)
    build_dir=build-asan
    cmake_args+=(-DFENCELOCK_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug -DFENCELOCK_BUILD_BENCH=OFF)
    ;;
  *) usage ;;
esac
[[ $# -le 1 ]] || usage

# CMake refuses to switch generators in an existing build directory; say what to do.
if [[ -f $build_dir/CMakeCache.txt ]] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$build_dir/CMakeCache.txt"; then
  echo "build.sh: $build_dir/ was configured with another generator; remove it and rerun" >&2
  exit 1
fi

cmake -S . -B "$build_dir" "${cmake_args[@]}"
cmake --build "$build_dir" -j "${FENCELOCK_JOBS:-2}"
