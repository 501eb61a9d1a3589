#include "bench_command.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend_choice.h"
#include "connect_warnings.h"
#include "core/backend_registry.h"
#include "duration_option.h"
#include "exit_codes.h"
#include "fencelock/client.h"
#include "held.h"
#include "progress.h"
#include "reporter.h"
#include "scenarios.h"
#include "waiters.h"

namespace fencelock::cli {

namespace {

Result<std::vector<int>> int_list(const std::string& option, const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    try {
      std::size_t used = 0;
      int value = std::stoi(item, &used);
      if (used != item.size() || value < 1) throw std::invalid_argument(item);
      out.push_back(value);
    } catch (const std::exception&) {
      return Status(
          Code::kInvalidArgument,
          fmt::format("{}: '{}' is not a list of positive numbers (e.g. 1,4,16)", option, text));
    }
  }
  if (out.empty()) return Status(Code::kInvalidArgument, option + " needs at least one number");
  return out;
}

// A short label for result lines: the scheme, plus the mode for PostgreSQL.
std::string label_of(const std::string& uri) {
  std::string scheme = uri.substr(0, uri.find("://"));
  const detail::BackendPlugin* plugin = detail::find_backend_plugin(uri);
  if (plugin != nullptr && plugin->family == "postgres")
    return uri.find("mode=lease") != std::string::npos ? "pg_lease" : "pg_advis";
  return scheme;
}

}  // namespace

int bench_command(const BenchArgs& args) {
  Reporter reporter(args.json);
  const std::vector<std::string> scenarios = {"uncontended", "baseline", "contended",
                                              "throughput",  "held",     "waiters"};
  if (std::find(scenarios.begin(), scenarios.end(), args.scenario) == scenarios.end()) {
    return reporter.fail(kExitUsage, "usage",
                         fmt::format("unknown scenario '{}' (uncontended, baseline, contended, "
                                     "throughput, held, waiters)",
                                     args.scenario));
  }
  auto critical = parse_duration_option("--critical", args.critical);
  auto ttl = parse_duration_option("--ttl", args.ttl);
  auto lockers = int_list("--lockers", args.lockers);
  auto leases = int_list("--leases", args.leases);
  auto waiters = int_list("--waiters", args.waiters);
  for (const Status& st :
       {critical.status(), ttl.status(), lockers.status(), leases.status(), waiters.status()}) {
    if (!st.ok()) return reporter.fail(kExitUsage, "usage", st.message());
  }
  // --duration DUR, as every subcommand that runs for a while takes it; --seconds INT is kept.
  auto length = args.seconds != 0
                    ? Result<std::chrono::milliseconds>(std::chrono::seconds(args.seconds))
                    : parse_duration_option("--duration", args.duration);
  if (!length.ok()) return reporter.fail(kExitUsage, "usage", length.status().message());
  if (*length < std::chrono::seconds(1) || args.workers < 1 || args.busy < 0 || args.busy > 64) {
    return reporter.fail(kExitUsage, "usage",
                         "--duration must be at least 1s, --workers at least 1 and --busy "
                         "between 0 and 64");
  }
  BackendChoice backend = choose_backend(args.backend, args.json);
  auto probe = connect_with_warnings(backend.uri, args.json);
  if (!probe.ok()) {
    return reporter.fail(exit_code_for(probe.code()), std::string(code_name(probe.code())),
                         explain_connect_failure(probe.status(), backend));
  }
  const std::string label = label_of(backend.uri);
  const nlohmann::json machine = {{"cores", std::thread::hardware_concurrency()},
                                  {"version", FENCELOCK_VERSION}};
  std::vector<nlohmann::json> results;
  const std::chrono::milliseconds duration = *length;
  Progress progress("bench", true);  // stderr: never mixed with the JSON lines on stdout
  // The scenarios print human rows on stdout; with --json stdout carries only the JSON lines,
  // so the rows go to stderr meanwhile.
  std::fflush(stdout);
  const int saved_stdout = args.json ? ::dup(STDOUT_FILENO) : -1;
  if (saved_stdout >= 0) ::dup2(STDERR_FILENO, STDOUT_FILENO);
  auto restore_stdout = [&] {
    std::fflush(stdout);
    if (saved_stdout >= 0) {
      ::dup2(saved_stdout, STDOUT_FILENO);
      ::close(saved_stdout);
    }
  };
  try {
    if (args.scenario == "uncontended" || args.scenario == "baseline") {
      results.push_back(
          bench::run_uncontended({.label = label, .uri = backend.uri, .duration = duration}));
    } else if (args.scenario == "contended") {
      // The target needs the uncontended cycle of the same run: one short measurement first.
      auto u = bench::run_uncontended(
          {.label = label, .uri = backend.uri, .duration = std::chrono::seconds(1)});
      results.push_back(bench::run_contended(
          {.label = label,
           .uri = backend.uri,
           .workers = args.workers,
           .critical_section = std::chrono::duration_cast<std::chrono::microseconds>(*critical),
           .duration = duration,
           .uncontended_cycle_us = u["fencelock"]["latency"]["mean_us"].get<double>()}));
    } else if (args.scenario == "throughput") {
      auto u = bench::run_uncontended(
          {.label = label, .uri = backend.uri, .duration = std::chrono::seconds(1)});
      for (std::size_t i = 0; i < lockers->size(); ++i) {
        const int c = (*lockers)[i];
        progress.update(
            static_cast<double>(i) / static_cast<double>(lockers->size()),
            fmt::format("{:.0f} cycles/s sequential", u["fencelock"]["cycles_per_s"].get<double>()),
            fmt::format("throughput with {} lockers", c));
        results.push_back(bench::run_throughput(
            {.label = label,
             .uri = backend.uri,
             .lockers = c,
             .busy = args.busy,
             .duration = duration,
             .sequential_cycles_per_s = u["fencelock"]["cycles_per_s"].get<double>(),
             .sequential_cpu_us = u["fencelock"]["cpu_us_per_cycle"].get<double>(),
             .async = args.api == "async"}));
      }
    } else if (args.scenario == "waiters") {
      for (std::size_t i = 0; i < waiters->size(); ++i) {
        const int n = (*waiters)[i];
        progress.update(static_cast<double>(i) / static_cast<double>(waiters->size()), "",
                        fmt::format("{} pending acquisitions", n));
        results.push_back(bench::run_waiters(
            {.label = label, .uri = backend.uri, .waiters = n, .ttl = *ttl, .window = duration}));
      }
    } else {
      for (std::size_t i = 0; i < leases->size(); ++i) {
        const int n = (*leases)[i];
        progress.update(static_cast<double>(i) / static_cast<double>(leases->size()), "",
                        fmt::format("holding {} leases", n));
        results.push_back(bench::run_held(
            {.label = label, .uri = backend.uri, .leases = n, .ttl = *ttl, .duration = duration}));
      }
    }
  } catch (const std::exception& e) {
    restore_stdout();
    return reporter.fail(kExitUnavailable, "unavailable", e.what());
  }
  restore_stdout();
  progress.update(1.0, "", "done");
  progress.finish();
  if (args.json) {
    for (auto& r : results) {
      r["machine"] = machine;
      std::fputs((json_line(r) + "\n").c_str(), stdout);
    }
  }
  return kExitOk;
}

}  // namespace fencelock::cli
