// Benchmark scenarios. Each returns its numbers as JSON (one object per result line) and prints a
// human-readable table row; library and baseline are measured interleaved in the same run.
#pragma once

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

namespace fencelock::bench {

struct UncontendedConfig {
  std::string label;  // "redis", "redlock", "postgres_lease"
  std::string uri;    // the baseline follows the scheme: bare hiredis, libpq or gRPC
  std::chrono::milliseconds duration{5000};
  int batch = 200;  // cycles per side before switching (interleaving)
};
// Acquire+release cycles of the library next to the bare-hiredis baseline.
nlohmann::json run_uncontended(const UncontendedConfig& config);

struct ContendedConfig {
  std::string label;
  std::string uri;
  int workers = 8;
  std::chrono::microseconds critical_section{1000};
  std::chrono::milliseconds duration{5000};
  double uncontended_cycle_us = 0;  // from run_uncontended, for the target
};
// W workers, one Client each, one key.
nlohmann::json run_contended(const ContendedConfig& config);

struct ThroughputConfig {
  std::string label;
  std::string uri;
  int lockers = 64;  // threads, each cycling acquire+release on a key of its own
  int busy = 0;      // processes spinning on the CPUs meanwhile (a busy machine)
  std::chrono::milliseconds duration{5000};
  double sequential_cycles_per_s = 0;  // from run_uncontended, for the comparison
  double sequential_cpu_us = 0;        // client CPU per sequential cycle, likewise
  // The lockers are chains of acquire_async / release_async on the Client's engine instead of
  // threads calling acquire / release.
  bool async = false;
};
// C concurrent lockers on distinct keys through one Client (one session, one connection set).
// Failures are counted, and apart those refused as held (kLocked): on keys of their own, only a
// lock that an earlier attempt left behind (an orphan, docs/PROTOCOLS.md "Late attempts") can
// refuse one, so 0 is expected, busy CPUs or not.
// etcd also runs the bare-gRPC baseline with the same number of threads, after the library.
nlohmann::json run_throughput(const ThroughputConfig& config);

}  // namespace fencelock::bench
