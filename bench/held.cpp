#include "held.h"

#include <hiredis/hiredis.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "fencelock/client.h"
#include "fencelock/metrics.h"
#include "redis_baseline.h"
#include "stats.h"

namespace fencelock::bench {

namespace {

using Clock = std::chrono::steady_clock;

// Resident set size of this process in bytes (/proc/self/statm).
double resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

// Sum of EVALSHA requests served by the Redis instances of `uri` (0 when not Redis).
long redis_commands(const std::string& uri) {
  if (!uri.starts_with("redis://") && !uri.starts_with("redlock://")) return 0;
  long total = 0;
  for (const auto& ep : endpoints_of(uri)) {
    auto colon = ep.rfind(':');
    redisContext* c = redisConnect(ep.substr(0, colon).c_str(), std::stoi(ep.substr(colon + 1)));
    if (c == nullptr || c->err) {
      if (c != nullptr) redisFree(c);
      continue;
    }
    // Requests, not the commands scripts run inside: EVALSHA calls (renewal is one script).
    auto* reply = static_cast<redisReply*>(redisCommand(c, "INFO commandstats"));
    if (reply != nullptr && reply->type == REDIS_REPLY_STRING) {
      std::string text(reply->str, reply->len);
      auto at = text.find("cmdstat_evalsha:calls=");
      if (at != std::string::npos) total += std::stol(text.substr(at + 22));
    }
    if (reply != nullptr) freeReplyObject(reply);
    redisFree(c);
  }
  return total;
}

}  // namespace

nlohmann::json run_held(const HeldConfig& config) {
  auto client = Client::connect(config.uri);
  if (!client.ok()) throw std::runtime_error(client.status().to_string());
  const double rss_before = resident_bytes();
  std::vector<Lease> held;
  held.reserve(static_cast<std::size_t>(config.leases));
  const auto take_start = Clock::now();
  for (int i = 0; i < config.leases; ++i) {
    auto key = LockKey::make(fmt::format("bench/held/{}/{}", config.leases, i));
    auto lease = client->acquire(*key, {.ttl = config.ttl});
    if (!lease.ok()) {
      throw std::runtime_error(fmt::format("held: lease {} of {}: {}", i, config.leases,
                                           lease.status().to_string()));
    }
    held.push_back(std::move(*lease));
    if ((i + 1) % 10'000 == 0) std::fprintf(stderr, "held: %d leases taken\n", i + 1);
  }
  const double take_seconds = std::chrono::duration<double>(Clock::now() - take_start).count();
  const double rss_held = resident_bytes();

  const MetricsSnapshot before = client->metrics();
  const long commands_before = redis_commands(config.uri);
  const auto cpu_before = process_cpu_time();
  const auto hold_start = Clock::now();
  std::this_thread::sleep_for(config.duration);
  const double seconds = std::chrono::duration<double>(Clock::now() - hold_start).count();
  const auto cpu = process_cpu_time() - cpu_before;
  const long commands = redis_commands(config.uri) - commands_before;
  const MetricsSnapshot after = client->metrics();

  std::size_t lost = 0;
  for (const auto& lease : held) lost += lease.is_lost() ? 1 : 0;
  const double rounds = static_cast<double>(after.renew_latency.count - before.renew_latency.count);
  const double renewed = static_cast<double>(after.renewals - before.renewals);
  const double cpu_share = static_cast<double>(cpu.count()) / 1e6 / seconds;
  const double bytes_per_lease = (rss_held - rss_before) / config.leases;
  fmt::print(
      "{:<8} held         {} leases, TTL {} s: {:.2f} renewal rounds/s, {:.0f} leases renewed/s, "
      "{} script requests/s to the servers, client CPU {:.2f}% of a core, {:.0f} bytes/lease, lost {}\n",
      config.label, config.leases, config.ttl.count() / 1000, rounds / seconds, renewed / seconds,
      commands > 0 ? fmt::format("{:.1f}", static_cast<double>(commands) / seconds) : "n/a",
      100 * cpu_share, bytes_per_lease, lost);
  nlohmann::json out = {{"backend", config.label},
                        {"scenario", "held"},
                        {"leases", config.leases},
                        {"ttl_ms", config.ttl.count()},
                        {"seconds", seconds},
                        {"take_seconds", take_seconds},
                        {"renew_rounds_per_s", rounds / seconds},
                        {"leases_renewed_per_s", renewed / seconds},
                        {"client_cpu_share", cpu_share},
                        {"bytes_per_lease", bytes_per_lease},
                        {"lost", lost}};
  if (commands > 0) out["server_script_requests_per_s"] = static_cast<double>(commands) / seconds;
  for (auto& lease : held) (void)lease.release();
  return out;
}

}  // namespace fencelock::bench
