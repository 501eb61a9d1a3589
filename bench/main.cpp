// fencelock_bench: measures fencelock next to a bare-protocol baseline in one run.
//
//   fencelock_bench [--redis redis://127.0.0.1:7101]
//                   [--redlock redlock://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103]
//                   [--postgres postgres://...] [--etcd etcd://127.0.0.1:7301,...]
//                   [--seconds 5] [--workers 8] [--critical-us 1000] [--lockers 64]
//                   [--json FILE]
//
// URIs default to $FENCELOCK_REDIS_URI / $FENCELOCK_REDLOCK_URI / $FENCELOCK_PG_URI /
// $FENCELOCK_ETCD_URI (scripts/servers.sh env); PostgreSQL and etcd are skipped without one.
// Prints a table; --json writes one JSON object per result line. See docs/BENCHMARKS.md.
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "scenarios.h"

namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}

}  // namespace

int main(int argc, char** argv) try {
  using namespace fencelock::bench;
  std::string redis = env_or("FENCELOCK_REDIS_URI", "redis://127.0.0.1:7101");
  std::string redlock =
      env_or("FENCELOCK_REDLOCK_URI", "redlock://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103");
  std::string postgres = env_or("FENCELOCK_PG_URI", "");  // empty: skipped
  std::string etcd = env_or("FENCELOCK_ETCD_URI", "");    // empty: skipped
  int seconds = 5, workers = 8, critical_us = 1000, lockers = 64;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--redis")
      redis = next();
    else if (arg == "--redlock")
      redlock = next();
    else if (arg == "--postgres")
      postgres = next();
    else if (arg == "--etcd")
      etcd = next();
    else if (arg == "--lockers")
      lockers = std::stoi(next());
    else if (arg == "--seconds")
      seconds = std::stoi(next());
    else if (arg == "--workers")
      workers = std::stoi(next());
    else if (arg == "--critical-us")
      critical_us = std::stoi(next());
    else if (arg == "--json")
      json_path = next();
    else {
      std::cerr << "usage: fencelock_bench [--redis URI] [--redlock URI] [--postgres URI] "
                   "[--etcd URI] [--seconds N] [--workers N] [--critical-us N] [--lockers N] "
                   "[--json FILE]\n";
      return 64;
    }
  }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  nlohmann::json machine = {{"cores", std::thread::hardware_concurrency()},
                            {"host", host},
                            {"version", FENCELOCK_VERSION}};
  fmt::print("fencelock_bench 0.1.0 on {} cores; {} s per scenario\n",
             std::thread::hardware_concurrency(), seconds);
  std::vector<nlohmann::json> results;
  try {
    std::vector<std::pair<std::string, std::string>> backends = {{"redis", redis},
                                                                 {"redlock", redlock}};
    if (!postgres.empty()) {  // both modes; the URI must not carry a mode of its own
      std::string sep = postgres.find('?') == std::string::npos ? "?" : "&";
      backends.emplace_back("pg_advis", postgres + sep + "mode=advisory");
      backends.emplace_back("pg_lease", postgres + sep + "mode=lease");
    }
    if (!etcd.empty()) backends.emplace_back("etcd", etcd);
    for (const auto& [label, uri] : backends) {
      auto u =
          run_uncontended({.label = label, .uri = uri, .duration = std::chrono::seconds(seconds)});
      results.push_back(u);
      results.push_back(run_contended(
          {.label = label,
           .uri = uri,
           .workers = workers,
           .critical_section = std::chrono::microseconds(critical_us),
           .duration = std::chrono::seconds(seconds),
           .uncontended_cycle_us = u["fencelock"]["latency"]["mean_us"].get<double>()}));
      results.push_back(run_throughput(
          {.label = label,
           .uri = uri,
           .lockers = lockers,
           .duration = std::chrono::seconds(seconds),
           .sequential_cycles_per_s = u["fencelock"]["cycles_per_s"].get<double>()}));
    }
  } catch (const std::exception& e) {
    std::cerr << "fencelock_bench: " << e.what()
              << "\n(start local servers with scripts/servers.sh start)\n";
    return 69;
  }
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    for (auto& r : results) {
      r["machine"] = machine;
      out << r.dump() << "\n";
    }
  }
  return 0;
} catch (const std::exception& e) {  // an option without its value, or a number std::stoi rejects
  std::cerr << "fencelock_bench: " << e.what() << "\n";
  return 64;
}
