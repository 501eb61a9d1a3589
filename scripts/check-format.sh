#!/usr/bin/env bash
# Gate: every C++ file in the repository is formatted as .clang-format says (clang-format 14,
# Debian 12's). Prints each file that differs and exits 1; `clang-format -i FILE` fixes it.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cpp' '*.h')
else
  mapfile -t files < <(find include src tools tests bench examples -name '*.cpp' -o -name '*.h')
fi
if clang-format --dry-run --Werror "${files[@]}"; then
  echo "check-format.sh: ${#files[@]} files formatted"
else
  echo "check-format.sh: FAILED: run clang-format -i on the files above" >&2
  exit 1
fi
