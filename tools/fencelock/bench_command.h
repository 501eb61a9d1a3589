// `fencelock bench --backend URI --scenario NAME [--json]`: the benchmark scenarios of
// docs/BENCHMARKS.md against one backend, every result next to a bare-driver baseline where one
// exists, in the same run.
//
//   uncontended  one Client, acquire+release cycles; cycles/s, p50/p99, CPU per cycle, next to
//                the bare driver (interleaved)
//   baseline     the same as uncontended (the baseline always runs with it, interleaved)
//   contended    --workers Clients, one key, --critical section; grants/s, wait p50/p99/max,
//                Jain fairness
//   throughput   --lockers C (a list: 1,4,16,64,256) threads on distinct keys; cycles/s per C,
//                failures (and those refused as held: on distinct keys only a lock left behind
//                by an earlier attempt can do that); --busy B processes spinning beside them
//   held         hold --leases N (a list) with renewal for --duration; renewal rounds/s, server
//                commands/s (Redis), client CPU, bytes per lease
//   waiters      --waiters N (a list) pending acquire_async calls on N keys held by another
//                Client, then all released; threads, bytes per waiter, server commands/s during
//                --duration of the wait (Redis), release-to-grant p50/p99, grants
//
// Each result is one line on stdout (--json: one JSON object per line, with the machine's cores
// and fencelock's version). Progress lines go to stderr.
#pragma once

#include <string>

namespace fencelock::cli {

struct BenchArgs {
  std::string backend;
  std::string scenario = "uncontended";
  bool json = false;
  std::string duration = "5s";  // --duration DUR: length of each measurement
  int seconds = 0;              // --seconds INT: the old spelling, a hidden alias (0: not given)
  int workers = 8;
  std::string critical = "1ms";
  std::string lockers = "1,4,16,64,256";
  int busy = 0;                  // throughput: processes that keep the CPUs busy meanwhile
  std::string api = "blocking";  // throughput: lockers as threads, or async chains
  std::string leases = "1000,10000";
  std::string waiters = "1000,10000";
  std::string ttl = "30s";
};

int bench_command(const BenchArgs& args);

}  // namespace fencelock::cli
