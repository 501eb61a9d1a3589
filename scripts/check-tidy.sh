#!/usr/bin/env bash
# Gate: clang-tidy 14 (checks in .clang-tidy, every finding an error) over the project's
# translation units in the compile database of build-tidy/ (clang++-14; only the generated code
# is built: the etcd protobuf/gRPC code and the embedded Lua/SQL headers). Prints each finding
# and exits 1 if there is any.
#
#   scripts/check-tidy.sh [REGEX]
#
# REGEX (bash ERE) selects the translation units by their path relative to the repository root,
# e.g. '^(src|tools)/'; the default is every project source (generated *.pb.cc never are).
# FENCELOCK_JOBS sets the parallel clang-tidy processes (default 2).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd -P)
build="build-tidy"
jobs=${FENCELOCK_JOBS:-2}
filter=${1:-'^(include|src|tools|tests|bench|examples)/'}
start=$SECONDS

cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
  -DFENCELOCK_BUILD_TESTS=ON -DFENCELOCK_BUILD_BENCH=ON >/dev/null
ninja -C "$build" -j "$jobs" fencelock_etcd_proto src/redis_scripts.h src/postgres_sql.h >/dev/null

# Project sources of the compile database, relative to the root.
mapfile -t all < <(python3 -c '
import json, os, sys
root = sys.argv[1]
for entry in json.load(open(os.path.join(root, sys.argv[2], "compile_commands.json"))):
    path = os.path.normpath(os.path.join(entry["directory"], entry["file"]))
    rel = os.path.relpath(path, root)
    if not rel.startswith("..") and not rel.startswith(sys.argv[2] + os.sep):
        print(rel)
' "$root" "$build" | sort -u)
files=()
for f in "${all[@]}"; do
  if [[ $f =~ $filter ]]; then files+=("$f"); fi
done
if [[ ${#files[@]} -eq 0 ]]; then
  echo "check-tidy.sh: FAILED: no translation unit matches '$filter'" >&2
  exit 1
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# One clang-tidy a file; a file's output is kept only when it has findings (or did not parse).
export FENCELOCK_TIDY_BUILD=$build FENCELOCK_TIDY_OUT=$out
# shellcheck disable=SC2016 # single quotes: the inner bash expands $1 and the variables
printf '%s\0' "${files[@]}" | xargs -0 -n 1 -P "$jobs" bash -c '
  log="$FENCELOCK_TIDY_OUT/${1//\//_}.log"
  if clang-tidy-14 -p "$FENCELOCK_TIDY_BUILD" --quiet "$1" >"$log" 2>&1; then rm -f "$log"; fi
' check-tidy

mapfile -t failed < <(find "$out" -name '*.log' | sort)
elapsed=$((SECONDS - start))
if [[ ${#failed[@]} -eq 0 ]]; then
  echo "check-tidy.sh: OK: ${#files[@]} translation units, no findings (${elapsed} s)"
  exit 0
fi
cat "${failed[@]}"
# A header's finding is reported once per translation unit that includes it: count distinct ones.
findings=$(cat "${failed[@]}" | grep -E ': (warning|error): ' | sort -u | wc -l)
echo "check-tidy.sh: FAILED: ${findings} distinct findings in ${#failed[@]} of ${#files[@]}" \
  "translation units (${elapsed} s); fix them or see docs/DEVELOPING.md (clang-tidy)" >&2
exit 1
