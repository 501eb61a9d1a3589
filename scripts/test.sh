#!/usr/bin/env bash
# The one test command for users and CI: installs missing dependencies, builds, runs every test.
#
#   scripts/test.sh              the format gate (scripts/check-format.sh), build/ and its tests
#   scripts/test.sh --sanitize   build-asan/ with ASan (leak checks on) and UBSan, aborting on error;
#                                every test but the long torture sessions (TortureCli.*), the
#                                blocking-API rows of the conformance suite and one CLI test
#                                of 348 CLI runs (see below);
#                                leak suppressions in tests/lsan.supp
#   scripts/test.sh --tsan       build-tsan/ (clang: ThreadSanitizer and -Wthread-safety -Werror over
#                                every target), then the unit tests, the conformance suite on
#                                every backend and etcd's own-key tests under TSan; suppressions in
#                                tests/tsan.supp
#
# Tests start their own redis-server, PostgreSQL (and PgBouncer) and etcd processes on free
# loopback ports (tests/support), installing the packages when missing; no scripts/servers.sh
# needed.
# FENCELOCK_JOBS sets the build and test parallelism (default 2). Exits non-zero on any failure.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

usage() {
  echo "usage: $0 [--sanitize | --tsan]" >&2
  exit 2
}

build_args=()
build_dir=build
ctest_args=()
case ${1:-} in
  "") ;;
  --sanitize)
    build_args=(--sanitize)
    build_dir=build-asan
    # Left out to keep CI within its hour, each run in build/ (and the conformance rows under
    # TSan too), the library code they drive run under ASan by other tests:
    # - the long torture sessions (TortureCli, about 5.5 minutes of ASan test time): the
    #   conformance, network-fault, CLI and unit tests;
    # - the conformance suite through the blocking API (rows <backend>; about 5 minutes): the
    #   same cases run through the asynchronous API (rows <backend>_async), whose callbacks and
    #   lifetimes are what ASan is for, and every backend's own tests use the blocking API;
    # - CliSecrets.NoMalformedUri... (348 runs of the CLI at about 0.5 s of ASan start-up each:
    #   over 3 minutes): the URI parsers run under ASan in the unit tests and the fuzz targets.
    # Left out because the slow ASan build makes it fail on timing, not on memory:
    # - EtcdStreams.AfterTheMemberDiesTheStreamsReopenOnTheNextMember (a just-started 3-member
    #   cluster under load: its watch did not show on the first member within 15 s in 3 of the
    #   last CI runs; it passes in build/ and the other EtcdStreams tests drive the same streams).
    ctest_args=(-E '^TortureCli[.]|^CliSecrets[.]NoMalformedUri|^EtcdStreams[.]AfterTheMemberDies|<Conformance/(memory|redis|redlock|postgres_lease|postgres_advisory|etcd)[.]')
    # verify_asan_link_order=0: torture workers run under LD_PRELOAD=libfaketime (clock faults).
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:verify_asan_link_order=0
    export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp"
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    ;;
  --tsan)
    build_args=(--tsan)
    build_dir=build-tsan
    ctest_args=(-L 'unit|contract|-tsan')
    # exitcode=66 (TSan's default) fails the test; second_deadlock_stack for lock-order reports.
    export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp"
    ;;
  *) usage ;;
esac
[[ $# -le 1 ]] || usage

./scripts/deps.sh
# The gates that need no build run first, once (not again for the sanitizer build).
[[ $build_dir == build ]] && ./scripts/check-format.sh
./scripts/build.sh "${build_args[@]}"

log=$build_dir/ctest.log
status=0
ctest --test-dir "$build_dir" --output-on-failure --no-tests=error -j "${FENCELOCK_JOBS:-2}" \
  --timeout 300 "${ctest_args[@]}" 2>&1 | tee "$log" || status=$?

# Failure output can be long: repeat ctest's verdict as the last lines.
echo
echo "== test.sh ($build_dir): $(grep -E 'tests passed|No tests were found' "$log" | tail -n 1)"
if [[ $status -ne 0 ]]; then
  sed -n '/^The following tests FAILED:/,$p' "$log"
  echo "== test.sh: FAILED (ctest exit $status)"
fi
exit "$status"
