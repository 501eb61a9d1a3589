#include "demo_command.h"

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "connect_warnings.h"
#include "exit_codes.h"
#include "fencelock/client.h"
#include "reporter.h"
#include "torture/checker.h"
#include "torture/demo_story.h"
#include "torture/orchestrator.h"

namespace fencelock::cli {

namespace {

using namespace torture;
using namespace std::chrono_literals;

constexpr auto kTtl = 2000ms;

void say(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

struct Row {
  std::string backend;
  DemoOutcome outcome;
};

// The table, the closing sentence, then `hint` (if any), then with --json the rows on stderr.
// Returns the exit code: 0 when every row is SAFE, 1 on any UNSAFE, else 2.

int summarize(const std::vector<Row>& rows, bool json, const char* hint = nullptr) {
  std::size_t width = 8;
  for (const auto& row : rows) width = std::max(width, row.backend.size());
  say(fmt::format("\n{:<{}} {:>7} {:>15} {:>9} {:>13}  {}", "backend", width, "tokens",
                  "stale rejected", "overlaps", "lost() delay", "verdict"));
  bool safe = true, unsafe = false;
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [backend, r] : rows) {
    safe = safe && r.verdict == Verdict::kSafe;
    unsafe = unsafe || r.verdict == Verdict::kUnsafe;
    say(fmt::format("{:<{}} {:>7} {:>15} {:>9} {:>13}  {}", backend, width, r.tokens,
                    r.stale_rejected, r.overlaps,
                    r.lost_delay_ms ? fmt::format("{:.0f} ms", *r.lost_delay_ms) : "-",
                    verdict_name(r.verdict)));
    for (const std::string& why : r.violations) say("  violation: " + why);
    for (const std::string& why : r.inconclusive) say("  inconclusive: " + why);
    out.push_back({{"backend", backend},
                   {"tokens", r.tokens},
                   {"stale_rejected", r.stale_rejected},
                   {"overlaps", r.overlaps},
                   {"lost_delay_ms", r.lost_delay_ms ? nlohmann::json(*r.lost_delay_ms) : nullptr},
                   {"taken_over", r.taken_over},
                   {"verdict", verdict_name(r.verdict)},
                   {"safe", r.verdict == Verdict::kSafe}});
  }
  say(safe     ? "\nEvery stale write was refused: no lost update, no write out of token order."
      : unsafe ? "\nA SAFETY VIOLATION was found (see the rows above)."
               : "\nA run proved nothing (INCONCLUSIVE, see the rows above): run the demo again.");
  if (hint != nullptr) say(std::string("\n") + hint);
  if (json) std::fputs((json_line(out) + "\n").c_str(), stderr);
  return safe ? kExitOk : unsafe ? kExitViolation : kExitInconclusive;
}

std::vector<std::pair<std::string, std::string>> default_backends() {
  std::vector<std::pair<std::string, std::string>> out;
  auto add = [&](const char* env, const char* label, const std::string& suffix = "") {
    if (const char* uri = std::getenv(env); uri != nullptr && *uri != '\0')
      out.emplace_back(label, uri + suffix);
  };
  add("FENCELOCK_REDIS_URI", "redis");
  add("FENCELOCK_REDLOCK_URI", "redlock");
  add("FENCELOCK_PG_URI", "postgres advisory");
  add("FENCELOCK_PG_URI", "postgres lease", "?mode=lease");
  add("FENCELOCK_ETCD_URI", "etcd");
  return out;
}

constexpr const char* kRealServersHint =
    "To see it on real servers (worker processes, a real SIGSTOP): ./scripts/demo.sh starts local "
    "Redis, PostgreSQL and etcd servers and runs it on all of them; or run "
    "eval \"$(scripts/servers.sh env)\" (FENCELOCK_REDIS_URI, FENCELOCK_REDLOCK_URI, "
    "FENCELOCK_PG_URI, FENCELOCK_ETCD_URI) before `fencelock demo`; or pass --backend URI "
    "(repeatable).";

// No --backend and no FENCELOCK_*_URI: the same story in this process on memory://
// (torture/demo_story.h). Its pause lasts until the other worker has written, so the story does
// not depend on timing.
int memory_demo(const Reporter& reporter, bool json) {
  const std::string uri = "memory://fencelock-demo";
  auto story = memory_story(uri, kTtl, say);
  if (!story.ok()) return reporter.fail(kExitSoftware, "internal", story.status().to_string());
  return summarize({{uri, *story}}, json, kRealServersHint);
}

}  // namespace

int demo_command(const DemoArgs& args) {
  Reporter reporter(args.json);
  std::vector<std::pair<std::string, std::string>> backends;
  for (const auto& uri : args.backends) backends.emplace_back("", uri);
  if (backends.empty()) backends = default_backends();
  if (backends.empty()) return memory_demo(reporter, args.json);
  char templ[] = "/tmp/fencelock-demo-XXXXXX";
  if (::mkdtemp(templ) == nullptr)
    return reporter.fail(kExitSoftware, "internal", "cannot create a directory under /tmp");
  const std::string root = templ;
  RunSettings settings;
  settings.workers = 2;
  settings.duration = 7s;
  settings.ttl = kTtl;
  settings.critical = 100ms;
  settings.faults = {"pause"};
  std::vector<Row> rows;
  for (std::size_t i = 0; i < backends.size(); ++i) {
    auto client = connect_with_warnings(backends[i].second, args.json);
    if (!client.ok()) {
      return reporter.fail(
          exit_code_for(client.code()), std::string(code_name(client.code())),
          fmt::format("{}: {}", backends[i].first.empty() ? "backend" : backends[i].first,
                      client.status().to_string()));
    }
    const std::string described = client->describe();
    say(fmt::format("\n== {} ({})", backends[i].first.empty() ? described : backends[i].first,
                    described));
    const std::string dir = fmt::format("{}/{}", root, i);
    std::filesystem::create_directories(dir);
    RunRecord record;
    try {
      record = run_torture(settings, backends[i].second, dir, [](const RunRecord&, double) {}, {});
    } catch (const std::exception& e) {
      return reporter.fail(kExitSoftware, "internal", e.what());
    }
    CheckOptions options;
    options.ttl = settings.ttl;
    options.duration = settings.duration;
    options.validity_bound = described.find("mode=advisory") == std::string::npos;
    options.requested_faults = settings.faults;
    rows.push_back({described, tell_pause(record, check(record, options), settings.ttl, say)});
  }
  return summarize(rows, args.json);
}

}  // namespace fencelock::cli
