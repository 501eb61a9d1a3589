#include "waiters.h"

#include <dirent.h>
#include <hiredis/hiredis.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "fencelock/client.h"
#include "redis_baseline.h"
#include "stats.h"

namespace fencelock::bench {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

// This process's threads by name (/proc/self/task/*/comm; fencelock names its own "fl-...",
// core/thread_name.h; a thread nobody named has its creator's name, the process's for the
// program's own).
std::map<std::string, int> threads_by_name() {
  std::map<std::string, int> out;
  if (DIR* dir = ::opendir("/proc/self/task")) {
    while (dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] == '.') continue;
      std::ifstream comm(std::string("/proc/self/task/") + entry->d_name + "/comm");
      std::string name;
      std::getline(comm, name);
      ++out[name.empty() ? "?" : name];
    }
    ::closedir(dir);
  }
  return out;
}

int total(const std::map<std::string, int>& threads) {
  int n = 0;
  for (const auto& [name, count] : threads) n += count;
  return n;
}

// "fl-engine 2, fl-subscribe 1".
std::string named(const std::map<std::string, int>& threads) {
  std::string out;
  for (const auto& [name, count] : threads) {
    out += fmt::format("{}{} {}", out.empty() ? "" : ", ", name, count);
  }
  return out.empty() ? "none" : out;
}

// Script calls (EVALSHA and EVAL: every request fencelock sends for a try, a renewal or a
// release is one) the backend's Redis instances served so far, summed; -1 when not a Redis URI
// or an instance did not answer. Not total_commands_processed: that also counts the commands a
// script runs inside (about 17 per try).
double redis_commands(const std::string& uri, int& instances) {
  instances = 0;
  if (!uri.starts_with("redis://") && !uri.starts_with("redlock://")) return -1;
  std::vector<HiredisContext> connections;
  try {
    connections = redis_connections(uri, {});
  } catch (const std::runtime_error&) {
    return -1;
  }
  double total = 0;
  for (auto& owned : connections) {
    auto* reply = static_cast<redisReply*>(redisCommand(owned.get(), "INFO commandstats"));
    if (reply == nullptr || reply->type != REDIS_REPLY_STRING) {
      if (reply != nullptr) freeReplyObject(reply);
      return -1;
    }
    const std::string text(reply->str, reply->len);
    freeReplyObject(reply);
    for (const char* name : {"cmdstat_evalsha:calls=", "cmdstat_eval:calls="}) {
      const auto at = text.find(name);
      if (at != std::string::npos) total += std::stod(text.substr(at + std::strlen(name)));
    }
    instances++;
  }
  return total;
}

// Counts completions and waits for a number of them.
class Counter {
 public:
  void add(bool ok) {
    std::lock_guard<std::mutex> lock(mu_);
    done_++;
    failed_ += ok ? 0 : 1;
    changed_.notify_all();
  }
  bool wait_for(int n, milliseconds limit) {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, limit, [&] { return done_ >= n; });
  }
  int done() {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  int failed() {
    std::lock_guard<std::mutex> lock(mu_);
    return failed_;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  int done_ = 0;
  int failed_ = 0;
};

Client connect_or_throw(const std::string& uri) {
  auto client = Client::connect(uri);
  if (!client.ok()) throw std::runtime_error(client.status().to_string());
  return std::move(*client);
}

}  // namespace

nlohmann::json run_waiters(const WaitersConfig& config) {
  const int n = config.waiters;
  Client holder = connect_or_throw(config.uri);
  Client waiter = connect_or_throw(config.uri);
  const std::string prefix = fmt::format(
      "bench/waiters/{}/{}/", ::getpid(),
      std::chrono::duration_cast<milliseconds>(Clock::now().time_since_epoch()).count());
  std::vector<LockKey> keys;
  keys.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) keys.push_back(*LockKey::make(prefix + std::to_string(i)));

  // The holders, taken asynchronously too (the fastest way to N grants).
  std::vector<std::optional<Lease>> held(static_cast<std::size_t>(n));
  std::mutex held_mu;
  Counter taken;
  for (int i = 0; i < n; ++i) {
    holder.acquire_async(keys[i], {.ttl = config.ttl}, [&, i](Result<Lease> lease) {
      if (lease.ok()) {
        std::lock_guard<std::mutex> lock(held_mu);
        held[static_cast<std::size_t>(i)].emplace(std::move(*lease));
      }
      taken.add(lease.ok());
    });
  }
  if (!taken.wait_for(n, milliseconds(600'000)) || taken.failed() > 0) {
    throw std::runtime_error(fmt::format("the holders took {} of {} keys", n - taken.failed(), n));
  }

  const std::map<std::string, int> threads_before = threads_by_name();
  const double rss_before = resident_bytes();
  int instances = 0;
  const double commands_before_start = redis_commands(config.uri, instances);

  // The waiters: wait far longer than the scenario runs; each records when it was granted.
  std::vector<std::atomic<Clock::rep>> granted_at(static_cast<std::size_t>(n));
  std::vector<std::optional<Lease>> granted(static_cast<std::size_t>(n));
  std::mutex granted_mu;
  Counter grants;
  const Clock::time_point sent = Clock::now();
  for (int i = 0; i < n; ++i) {
    waiter.acquire_async(
        keys[i], {.ttl = config.ttl, .wait = milliseconds(3'600'000)}, [&, i](Result<Lease> lease) {
          granted_at[static_cast<std::size_t>(i)] = Clock::now().time_since_epoch().count();
          if (lease.ok()) {
            std::lock_guard<std::mutex> lock(granted_mu);
            granted[static_cast<std::size_t>(i)].emplace(std::move(*lease));
          }
          grants.add(lease.ok());
        });
  }
  // Settled: the first tries are a burst; once two half-seconds in a row see the servers'
  // command rate within 10 % of each other the wait is in its steady state (at most 60 s; no
  // count: a fixed 5 s).
  double last = commands_before_start;
  double last_rate = -1;
  for (int rounds = 0; rounds < 120; ++rounds) {
    std::this_thread::sleep_for(milliseconds(500));
    const double now = redis_commands(config.uri, instances);
    if (now < 0) {
      if (rounds >= 9) break;
      continue;
    }
    const double rate = now - last;
    last = now;
    if (last_rate >= 0 && std::abs(rate - last_rate) <= 0.1 * std::max(rate, last_rate) + 2) break;
    last_rate = rate;
  }
  const double settle_s = std::chrono::duration<double>(Clock::now() - sent).count();
  const std::map<std::string, int> threads_waiting = threads_by_name();
  const double rss_waiting = resident_bytes();
  const double window_start = redis_commands(config.uri, instances);
  std::this_thread::sleep_for(config.window);
  const double window_end = redis_commands(config.uri, instances);
  const int early_grants = grants.done();

  // Every holder releases at once; each waiter's grant is timed against its key's release.
  std::vector<Clock::rep> released_at(static_cast<std::size_t>(n));
  Counter releases;
  for (int i = 0; i < n; ++i) {
    released_at[static_cast<std::size_t>(i)] = Clock::now().time_since_epoch().count();
    std::lock_guard<std::mutex> lock(held_mu);
    held[static_cast<std::size_t>(i)]->release_async(
        [&](const Status& s) { releases.add(s.ok()); });
  }
  const bool all_granted = grants.wait_for(n, milliseconds(600'000));
  (void)releases.wait_for(n, milliseconds(600'000));
  std::vector<double> latency_us;
  latency_us.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const auto at = granted_at[static_cast<std::size_t>(i)].load();
    if (at == 0) continue;
    latency_us.push_back(static_cast<double>(at - released_at[static_cast<std::size_t>(i)]) /
                         1000.0);
  }
  const Summary latency = summarize(latency_us);
  {
    std::lock_guard<std::mutex> lock(granted_mu);
    for (auto& lease : granted) {
      if (lease) (void)lease->release();
    }
  }

  nlohmann::json out = {
      {"scenario", "waiters"},
      {"backend", config.label},
      {"waiters", n},
      {"threads_before", total(threads_before)},
      {"threads_waiting", total(threads_waiting)},
      {"threads_before_by_name", threads_before},
      {"threads_waiting_by_name", threads_waiting},
      {"bytes_per_waiter", (rss_waiting - rss_before) / n},
      {"settle_s", settle_s},
      {"granted", all_granted ? n - grants.failed() : grants.done() - grants.failed()},
      {"granted_before_release", early_grants},
      {"release_to_grant",
       {{"p50_us", latency.p50_us}, {"p99_us", latency.p99_us}, {"max_us", latency.max_us}}},
  };
  if (window_start >= 0 && window_end >= 0) {
    const double window_s = std::chrono::duration<double>(config.window).count();
    const double commands = window_end - window_start;
    out["server_requests_per_s_while_waiting"] = commands / window_s;
    out["server_requests_per_waiter_per_min"] = commands / window_s * 60.0 / n;
  }
  std::printf(
      "%-9s waiters %7d  threads %d -> %d (%s)  %.0f B/waiter  settle "
      "%.1f s  granted %d  release->grant p50 %.0f us p99 %.0f us",
      config.label.c_str(), n, total(threads_before), total(threads_waiting),
      named(threads_waiting).c_str(), (rss_waiting - rss_before) / n, settle_s,
      out["granted"].get<int>(), latency.p50_us, latency.p99_us);
  if (out.contains("server_requests_per_s_while_waiting")) {
    std::printf("  server %.0f requests/s while waiting (%.2f per waiter per min)",
                out["server_requests_per_s_while_waiting"].get<double>(),
                out["server_requests_per_waiter_per_min"].get<double>());
  }
  std::printf("\n");
  return out;
}

}  // namespace fencelock::bench
