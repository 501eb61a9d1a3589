#include "demo_command.h"

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "connect_warnings.h"
#include "core/mutex.h"
#include "exit_codes.h"
#include "fencelock/client.h"
#include "fencelock/fence.h"
#include "reporter.h"
#include "torture/checker.h"
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

double seconds(Nanos n) { return static_cast<double>(n) / 1e9; }

struct Outcome {
  std::string backend;
  Report report;
  std::optional<double> lost_delay_ms;  // the paused worker's lost() after its validity
  bool taken_over = false;              // another worker was granted during the pause
};

// Tells what happened to the paused worker, from the run's record.
Outcome tell(const std::string& backend, const RunRecord& record, const CheckOptions& options) {
  Outcome out{backend, check(record, options), std::nullopt, false};
  if (record.pauses.empty()) {
    say("  (no holder could be paused: the run was too short)");
    return out;
  }
  const PauseWindow& pause = record.pauses.front();
  const int p = pause.worker;
  std::uint64_t paused_token = 0;
  for (const auto& g : record.grant_log) {
    if (g.worker == p && g.at <= pause.from) paused_token = g.token;
  }
  say(fmt::format(
      "  worker {} holds the lock with token {}, has read the register, and is paused "
      "for {:.1f} s (TTL {:.1f} s)",
      p, paused_token, seconds(pause.to - pause.from), seconds(kTtl.count() * 1'000'000)));
  std::optional<GrantRecord> next;
  for (const auto& g : record.grant_log) {
    if (g.worker != p && g.at > pause.from && g.at < pause.to && (!next || g.at < next->at))
      next = g;
  }
  if (next) {
    out.taken_over = true;
    say(fmt::format("  worker {} is granted token {} {:.1f} s into the pause, and writes",
                    next->worker, next->token, seconds(next->at - pause.from)));
  } else {
    say("  nobody else is granted the lock during the pause: this backend keeps a paused "
        "holder's lock (PostgreSQL advisory locks live as long as the holder's session)");
  }
  for (const auto& l : record.leases) {
    if (l.lost && l.worker == p && l.token == paused_token) {
      out.lost_delay_ms = static_cast<double>(l.fired_at - l.valid_until) / 1e6;
      say(
          fmt::format("  worker {} wakes: lost() fired {:.0f} ms after its validity ended (it "
                      "was frozen); it ignores the signal and writes anyway",
                      p, *out.lost_delay_ms));
    }
  }
  for (const auto& e : record.register_events) {
    if (e.worker != p || e.token != paused_token || e.at < pause.to ||
        e.kind != RegisterEvent::kWrite) {
      continue;
    }
    say(e.accepted ? std::string("  its write is accepted: no newer token was issued, so it "
                                 "still was the holder")
                   : fmt::format("  the fence refuses it: rejected: stale token {} < {}", e.token,
                                 e.highest));
    break;
  }
  return out;
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

// No --backend and no FENCELOCK_*_URI: the same story in this process on memory:// (two Clients
// share one in-process lock table, a FenceGate guards the register). A paused process renews
// nothing, so the paused worker's lease is not renewed; its pause lasts until the other worker
// has written, so the story does not depend on timing.
int memory_demo(const Reporter& reporter, bool json) {
  const std::string uri = "memory://fencelock-demo";
  auto paused_client = Client::connect(uri);
  auto other_client = Client::connect(uri);
  if (!paused_client.ok() || !other_client.ok()) {
    const Status& failed = paused_client.ok() ? other_client.status() : paused_client.status();
    return reporter.fail(kExitSoftware, "internal", failed.to_string());
  }
  const LockKey key = *LockKey::make("demo/register");
  FenceGate gate;
  std::uint64_t value = 0;  // the register: written only under the gate
  say(fmt::format("\n== {} (in this process: two Clients share one lock table, no server)", uri));
  // Declared before the lease: its release fires lost() (and so the callback) at the latest.
  std::optional<std::chrono::steady_clock::time_point> lost_at;
  detail::Mutex lost_mu;
  auto first = paused_client->acquire(key, {.ttl = kTtl, .renew = false});
  if (!first.ok()) return reporter.fail(kExitSoftware, "internal", first.status().to_string());
  const FencingToken stale = first->token();
  std::uint64_t read = 0;
  (void)gate.run(stale, [&] { read = value; });
  const auto paused_at = std::chrono::steady_clock::now();
  first->on_lost([&] {
    detail::MutexLock lock(lost_mu);
    lost_at = std::chrono::steady_clock::now();
  });
  say(fmt::format(
      "  worker 1 holds the lock with token {}, has read the register, and is paused (TTL "
      "{:.1f} s; a paused process renews nothing)",
      stale.value(), seconds(kTtl.count() * 1'000'000)));
  auto second = other_client->acquire(key, {.ttl = kTtl, .wait = 10 * kTtl});
  if (!second.ok()) return reporter.fail(kExitSoftware, "internal", second.status().to_string());
  const auto granted_at = std::chrono::steady_clock::now();
  const FencingToken fresh = second->token();
  const Status fresh_write = gate.run(fresh, [&] { value = read + 1; });
  say(fmt::format("  worker 2 is granted token {} {:.1f} s into the pause, and writes ({})",
                  fresh.value(), std::chrono::duration<double>(granted_at - paused_at).count(),
                  fresh_write.ok() ? "accepted" : fresh_write.to_string()));
  std::optional<double> lost_delay_ms;
  {
    detail::MutexLock lock(lost_mu);
    if (lost_at) {
      lost_delay_ms =
          std::chrono::duration<double, std::milli>(*lost_at - first->valid_until()).count();
    }
  }
  // In one process lost() fires on time (never after valid_until()); a frozen process sees it
  // only when it wakes, as the runs on real servers show.
  say(lost_delay_ms
          ? fmt::format("  worker 1 wakes: lost() fired {:.0f} ms {} its validity ended; it "
                        "ignores the signal and writes anyway",
                        std::abs(*lost_delay_ms), *lost_delay_ms < 0 ? "before" : "after")
          : std::string("  worker 1 wakes: lost() has NOT fired; it writes"));
  const Status stale_write = gate.run(stale, [&] { value = read + 1; });
  say(stale_write.ok() ? std::string("  its write is ACCEPTED")
                       : "  the fence refuses it: " + stale_write.message());
  // Two grants; an overlap is worker 2 granted while worker 1's lease was still valid.
  const int grants = 2;
  const int overlaps = granted_at < first->valid_until() ? 1 : 0;
  const bool safe = fresh > stale && fresh_write.ok() && stale_write.code() == Code::kFenced &&
                    value == 1 && lost_delay_ms.has_value() && overlaps == 0;
  const std::string verdict = safe ? "SAFE" : "UNSAFE";
  say(fmt::format("\n{:<24} {:>7} {:>15} {:>9} {:>13}  {}", "backend", "tokens", "stale rejected",
                  "overlaps", "lost() delay", "verdict"));
  const int rejected = stale_write.ok() ? 0 : 1;
  say(fmt::format("{:<24} {:>7} {:>15} {:>9} {:>13}  {}", uri, grants, rejected, overlaps,
                  lost_delay_ms ? fmt::format("{:.0f} ms", *lost_delay_ms) : "-", verdict));
  say(safe ? "\nEvery stale write was refused: no lost update, no write out of token order."
           : "\nA SAFETY VIOLATION was found (see the rows above).");
  say(std::string("\n") + kRealServersHint);
  if (json) {
    nlohmann::json rows = nlohmann::json::array();
    rows.push_back({{"backend", uri},
                    {"tokens", grants},
                    {"stale_rejected", rejected},
                    {"overlaps", overlaps},
                    {"lost_delay_ms", lost_delay_ms ? nlohmann::json(*lost_delay_ms) : nullptr},
                    {"taken_over", fresh > stale},
                    {"verdict", verdict},
                    {"safe", safe}});
    std::fputs((json_line(rows) + "\n").c_str(), stderr);
  }
  return safe ? kExitOk : 1;
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
  std::vector<Outcome> outcomes;
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
    outcomes.push_back(tell(described, record, options));
  }
  std::size_t width = 8;
  for (const auto& o : outcomes) width = std::max(width, o.backend.size());
  say(fmt::format("\n{:<{}} {:>7} {:>15} {:>9} {:>13}  {}", "backend", width, "tokens",
                  "stale rejected", "overlaps", "lost() delay", "verdict"));
  bool safe = true, unsafe = false;
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& o : outcomes) {
    safe = safe && o.report.safe();
    unsafe = unsafe || o.report.verdict() == Verdict::kUnsafe;
    say(fmt::format("{:<{}} {:>7} {:>15} {:>9} {:>13}  {}", o.backend, width, o.report.grants,
                    o.report.writes_rejected, o.report.overlaps,
                    o.lost_delay_ms ? fmt::format("{:.0f} ms", *o.lost_delay_ms) : "-",
                    verdict_name(o.report.verdict())));
    for (const std::string& why : o.report.violations) say("  violation: " + why);
    for (const std::string& why : o.report.inconclusive) say("  inconclusive: " + why);
    rows.push_back({{"backend", o.backend},
                    {"tokens", o.report.grants},
                    {"stale_rejected", o.report.writes_rejected},
                    {"overlaps", o.report.overlaps},
                    {"lost_delay_ms", o.lost_delay_ms ? nlohmann::json(*o.lost_delay_ms) : nullptr},
                    {"taken_over", o.taken_over},
                    {"verdict", verdict_name(o.report.verdict())},
                    {"safe", o.report.safe()}});
  }
  say(safe     ? "\nEvery stale write was refused: no lost update, no write out of token order."
      : unsafe ? "\nA SAFETY VIOLATION was found (see the rows above)."
               : "\nA run proved nothing (INCONCLUSIVE, see the rows above): run the demo again.");
  if (args.json) std::fputs((json_line(rows) + "\n").c_str(), stderr);
  return safe ? kExitOk : unsafe ? 1 : 2;
}

}  // namespace fencelock::cli
