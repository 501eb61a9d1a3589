#include "scenarios.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/mutex.h"
#include "fencelock/config.h"
#if FENCELOCK_HAS_ETCD
#include "etcd_baseline.h"
#endif
#include "fencelock/client.h"
#include "postgres/postgres_uri.h"
#include "postgres_baseline.h"
#include "redis_baseline.h"
#include "stats.h"

namespace fencelock::bench {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

Client connect(const std::string& uri) {
  auto client = Client::connect(uri);
  if (!client.ok()) throw std::runtime_error(client.status().to_string());
  return std::move(*client);
}

nlohmann::json summary_json(const Summary& s) {
  return {{"count", s.count},   {"mean_us", s.mean_us}, {"p50_us", s.p50_us},
          {"p99_us", s.p99_us}, {"p999_us", s.p999_us}, {"max_us", s.max_us},
          {"cdf", s.cdf}};
}

// Measures `cycle` `count` times, appending latencies; returns wall and CPU time spent.
template <typename Cycle>
std::pair<Clock::duration, std::chrono::microseconds> measure(int count,
                                                              std::vector<double>& samples,
                                                              Cycle cycle) {
  auto cpu0 = process_cpu_time();
  auto wall0 = Clock::now();
  for (int i = 0; i < count; ++i) {
    auto t0 = Clock::now();
    cycle();
    samples.push_back(micros(Clock::now() - t0));
  }
  return {Clock::now() - wall0, process_cpu_time() - cpu0};
}

}  // namespace

namespace {

// "met" or "MISSED", after a target.
const char* mark(bool met) { return met ? "met" : "MISSED"; }

// Calls that returned an error: how many, and the first one's text (so that a count is never
// shown without what it counts).
class Failures {
 public:
  void add(const Status& status) {
    count_++;
    detail::MutexLock lock(mu_);
    if (first_.empty()) first_ = status.to_string();
  }
  void add(std::string_view what) {
    count_++;
    detail::MutexLock lock(mu_);
    if (first_.empty()) first_ = what;
  }
  int count() const { return count_.load(); }
  std::string first() const {
    detail::MutexLock lock(mu_);
    return first_;
  }
  // "0", or "N (calls that returned an error; the first: TEXT)".
  std::string text() const {
    if (count() == 0) return "0";
    return fmt::format("{} (calls that returned an error; the first: {})", count(), first());
  }

 private:
  std::atomic<int> count_{0};
  mutable detail::Mutex mu_;
  std::string first_ FENCELOCK_GUARDED_BY(mu_);
};

}  // namespace

nlohmann::json run_uncontended(const UncontendedConfig& config) {
  Client client = connect(config.uri);  // also creates the PostgreSQL schema the baseline needs
  std::function<bool(const std::string&)> bare;
  if (config.uri.starts_with("postgres")) {
    auto split = detail::postgres::split_postgres_uri(config.uri);
    auto pg = std::make_shared<PostgresBaseline>(split->conninfo, split->mode == "advisory");
    bare = [pg](const std::string& k) { return pg->cycle(k); };
#if FENCELOCK_HAS_ETCD
  } else if (config.uri.starts_with("etcd")) {
    auto etcd = std::make_shared<EtcdBaseline>(config.uri);
    bare = [etcd](const std::string& k) { return etcd->cycle(k); };
#endif
  } else {
    auto redis = std::make_shared<RedisBaseline>(config.uri);
    bare = [redis](const std::string& k) { return redis->cycle(k); };
  }
  auto lib_key = *LockKey::make("bench/uncontended/lib");
  Failures failures, base_failures;
  auto lib_cycle = [&] {
    auto lease = client.acquire(lib_key, {.ttl = 10s});
    if (!lease.ok()) {
      failures.add(lease.status());
    } else if (Status released = lease->release(); !released.ok()) {
      failures.add(released);
    }
  };
  auto base_cycle = [&] {
    if (!bare("bench/uncontended/base")) base_failures.add("the bare driver's cycle failed");
  };
  std::vector<double> lib, base;
  measure(config.batch, lib, lib_cycle);  // warm-up: connections, script caches
  measure(config.batch, base, base_cycle);
  lib.clear();
  base.clear();
  Clock::duration lib_wall{}, base_wall{};
  std::chrono::microseconds lib_cpu{}, base_cpu{};
  auto end = Clock::now() + config.duration;
  for (int round = 0; Clock::now() < end && round < 100'000; ++round) {
    auto [bw, bc] = measure(config.batch, base, base_cycle);
    auto [lw, lc] = measure(config.batch, lib, lib_cycle);
    base_wall += bw, base_cpu += bc, lib_wall += lw, lib_cpu += lc;
  }
  Summary ls = summarize(lib), bs = summarize(base);
  double lib_rate = static_cast<double>(ls.count) / std::chrono::duration<double>(lib_wall).count();
  double base_rate =
      static_cast<double>(bs.count) / std::chrono::duration<double>(base_wall).count();
  double lib_cpu_us = static_cast<double>(lib_cpu.count()) / static_cast<double>(ls.count);
  double base_cpu_us = static_cast<double>(base_cpu.count()) / static_cast<double>(bs.count);
  fmt::print(
      "{:<8} uncontended  fencelock {:>8.0f} cycles/s  p50 {:>7.1f} us  p99 {:>7.1f} us  p999 "
      "{:>7.1f} us  cpu {:>5.1f} us/cycle\n",
      config.label, lib_rate, ls.p50_us, ls.p99_us, ls.p999_us, lib_cpu_us);
  fmt::print(
      "{:<8} uncontended  baseline  {:>8.0f} cycles/s  p50 {:>7.1f} us  p99 {:>7.1f} us  p999 "
      "{:>7.1f} us  cpu {:>5.1f} us/cycle\n",
      config.label, base_rate, bs.p50_us, bs.p99_us, bs.p999_us, base_cpu_us);
  const double p50_ratio = ls.p50_us / bs.p50_us, cpu_ratio = lib_cpu_us / base_cpu_us;
  fmt::print(
      "{:<8} uncontended  ratio     p50 {:.2f}x (target <= 1.25x: {})  cpu {:.2f}x (target <= "
      "2x: {})\n",
      config.label, p50_ratio, mark(p50_ratio <= 1.25), cpu_ratio, mark(cpu_ratio <= 2.0));
  fmt::print("{:<8} uncontended  failures  fencelock {}  baseline {}\n", config.label,
             failures.text(), base_failures.text());
  return {{"backend", config.label},
          {"scenario", "uncontended"},
          {"fencelock",
           {{"cycles_per_s", lib_rate},
            {"latency", summary_json(ls)},
            {"cpu_us_per_cycle", lib_cpu_us}}},
          {"baseline",
           {{"cycles_per_s", base_rate},
            {"latency", summary_json(bs)},
            {"cpu_us_per_cycle", base_cpu_us}}},
          {"p50_ratio", p50_ratio},
          {"cpu_ratio", cpu_ratio},
          {"p50_target_met", p50_ratio <= 1.25},
          {"cpu_target_met", cpu_ratio <= 2.0},
          {"failures", failures.count() + base_failures.count()},
          {"failures_fencelock", failures.count()},
          {"failures_baseline", base_failures.count()},
          {"first_failure", failures.first()}};
}

nlohmann::json run_contended(const ContendedConfig& config) {
  std::vector<Client> clients;
  clients.reserve(static_cast<std::size_t>(config.workers));
  for (int i = 0; i < config.workers; ++i) clients.push_back(connect(config.uri));
  auto key = *LockKey::make("bench/contended");
  fencelock::detail::Mutex mu;
  std::vector<double> waits;
  std::vector<double> handoffs;  // a release call to the next grant, when a waiter was queued
  std::vector<double> grants(static_cast<std::size_t>(config.workers));
  Failures failures;
  // When the last holder called release(): the next grant measures its hand-off against it.
  std::atomic<Clock::rep> released_at{0};
  auto start = Clock::now();
  auto end = start + config.duration;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(config.workers));
  for (int w = 0; w < config.workers; ++w) {
    threads.emplace_back([&, w] {
      std::vector<double> mine, my_handoffs;
      while (Clock::now() < end) {
        auto t0 = Clock::now();
        auto lease = clients[static_cast<std::size_t>(w)].acquire(key, {.ttl = 10s, .wait = 30s});
        if (!lease.ok()) {
          failures.add(lease.status());
          continue;
        }
        const auto granted = Clock::now();
        mine.push_back(micros(granted - t0));
        // A hand-off: this waiter was already waiting when the previous holder let go.
        const Clock::time_point released{Clock::duration(released_at.load())};
        if (released.time_since_epoch().count() != 0 && t0 < released) {
          my_handoffs.push_back(micros(granted - released));
        }
        std::this_thread::sleep_for(config.critical_section);
        released_at.store(Clock::now().time_since_epoch().count());
        (void)lease->release();
        grants[static_cast<std::size_t>(w)]++;
      }
      fencelock::detail::MutexLock lock(mu);
      waits.insert(waits.end(), mine.begin(), mine.end());
      handoffs.insert(handoffs.end(), my_handoffs.begin(), my_handoffs.end());
    });
  }
  for (auto& t : threads) t.join();
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  Summary ws = summarize(waits);
  Summary hs = summarize(handoffs);
  double rate = static_cast<double>(ws.count) / seconds;
  double fairness = jain_fairness(grants);
  double ideal =
      1e6 / (static_cast<double>(config.critical_section.count()) + config.uncontended_cycle_us);
  fmt::print(
      "{:<8} contended    {} workers, {} us critical section: {:>6.0f} grants/s (target >= {:.0f} "
      "= 80% of {:.0f}: {})\n",
      config.label, config.workers, config.critical_section.count(), rate, 0.8 * ideal, ideal,
      mark(rate >= 0.8 * ideal));
  fmt::print(
      "{:<8} contended    wait mean {:.0f} us  p50 {:.0f} us  p99 {:.0f} us (target <= {:.0f} = 3x "
      "mean: {})  max {:.0f} us  fairness {:.3f} (target >= 0.95: {})  failures {}\n",
      config.label, ws.mean_us, ws.p50_us, ws.p99_us, 3 * ws.mean_us,
      mark(ws.p99_us <= 3 * ws.mean_us), ws.max_us, fairness, mark(fairness >= 0.95),
      failures.text());
  fmt::print(
      "{:<8} contended    hand-off (release call to the next grant) p50 {:.0f} us  p99 "
      "{:.0f} us  max {:.0f} us\n",
      config.label, hs.p50_us, hs.p99_us, hs.max_us);
  return {{"backend", config.label},
          {"scenario", "contended"},
          {"workers", config.workers},
          {"critical_section_us", config.critical_section.count()},
          {"grants_per_s", rate},
          {"target_grants_per_s", 0.8 * ideal},
          {"wait", summary_json(ws)},
          {"handoff", summary_json(hs)},
          {"fairness", fairness},
          {"failures", failures.count()},
          {"first_failure", failures.first()}};
}

namespace {

// `lockers` threads calling cycle(thread index) until `duration` ends: cycles/s and failures.
std::pair<double, int> concurrent_cycles(int lockers, std::chrono::milliseconds duration,
                                         const std::function<bool(int)>& cycle) {
  std::atomic<long> cycles{0};
  std::atomic<int> failures{0};
  const auto start = Clock::now(), end = start + duration;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(lockers));
  for (int t = 0; t < lockers; ++t) {
    threads.emplace_back([&, t] {
      while (Clock::now() < end) {
        if (cycle(t)) {
          cycles++;
        } else {
          failures++;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return {static_cast<double>(cycles.load()) / seconds, failures.load()};
}

// Processes that spin on the CPUs for as long as this object lives (and no longer than this
// process: PR_SET_PDEATHSIG), as other work on a busy machine would.
class BusyProcesses {
 public:
  explicit BusyProcesses(int n) {
    for (int i = 0; i < n; ++i) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        volatile unsigned long spin = 0;
        for (;;) {
          spin = spin + 1;
        }
      }
      if (pid > 0) pids_.push_back(pid);
    }
  }
  ~BusyProcesses() {
    for (pid_t pid : pids_) ::kill(pid, SIGKILL);
    for (pid_t pid : pids_) ::waitpid(pid, nullptr, 0);
  }
  BusyProcesses(const BusyProcesses&) = delete;
  BusyProcesses& operator=(const BusyProcesses&) = delete;

 private:
  std::vector<pid_t> pids_;
};

}  // namespace

// C chains of acquire_async -> release_async -> acquire_async ... on keys of their own, until
// `duration` has passed; returns cycles/s and failures, like concurrent_cycles.
std::pair<double, int> async_cycles(Client& client, const std::vector<LockKey>& keys,
                                    std::chrono::milliseconds duration) {
  struct Chains {
    Client& client;
    const std::vector<LockKey>& keys;
    Clock::time_point end;
    std::atomic<long> cycles{0};
    std::atomic<int> failures{0};
    fencelock::detail::Mutex mu;
    std::condition_variable_any finished;
    int running FENCELOCK_GUARDED_BY(mu) = 0;

    void start(std::size_t i) {
      const AcquireOptions options{.ttl = std::chrono::seconds(10)};
      client.acquire_async(keys[i], options, [this, i](Result<Lease> lease) {
        if (!lease.ok()) {
          failures++;
          return next(i);
        }
        auto held = std::make_shared<Lease>(std::move(*lease));
        held->release_async([this, i, held](const Status& released) {
          if (released.ok()) {
            cycles++;
          } else {
            failures++;
          }
          next(i);
        });
      });
    }
    void next(std::size_t i) {
      if (Clock::now() < end) return start(i);
      fencelock::detail::MutexLock lock(mu);
      if (--running == 0) finished.notify_all();
    }
  };
  const auto begin = Clock::now();
  Chains chains{client, keys, begin + duration};
  {
    fencelock::detail::MutexLock lock(chains.mu);
    chains.running = static_cast<int>(keys.size());
  }
  for (std::size_t i = 0; i < keys.size(); ++i) chains.start(i);
  {
    fencelock::detail::MutexLock lock(chains.mu);
    chains.finished.wait(lock, [&]() FENCELOCK_REQUIRES(chains.mu) { return chains.running == 0; });
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  return {static_cast<double>(chains.cycles.load()) / seconds, chains.failures.load()};
}

nlohmann::json run_throughput(const ThroughputConfig& config) {
  Client client = connect(config.uri);
  std::vector<LockKey> keys;
  keys.reserve(static_cast<std::size_t>(config.lockers));
  for (int t = 0; t < config.lockers; ++t)
    keys.push_back(*LockKey::make(fmt::format("bench/throughput/{}", t)));
  // A refusal is an orphan's only where this thread's previous cycle ended with nothing owed:
  // a release that returned OK, or an acquisition that failed saying it released its attempt
  // (or none before). After a release that said the lock is still held (not OK), it is not.
  std::atomic<int> locked{0}, locked_after_failed_release{0};
  std::vector<char> release_failed(keys.size(), 0);  // each thread its own element
  std::pair<double, int> measured;
  const auto cpu0 = process_cpu_time();
  const auto wall0 = Clock::now();
  if (config.async) {
    BusyProcesses busy(config.busy);
    measured = async_cycles(client, keys, config.duration);
  } else {
    BusyProcesses busy(config.busy);
    measured = concurrent_cycles(config.lockers, config.duration, [&](int t) {
      const auto i = static_cast<std::size_t>(t);
      auto lease = client.acquire(keys[i], {.ttl = 10s});
      if (lease.code() == Code::kLocked)
        (release_failed[i] ? locked_after_failed_release : locked)++;
      if (!lease.ok()) {
        // "... the key may stay held until its TTL ends": its release failed too.
        release_failed[i] =
            static_cast<char>(lease.status().message().find("may stay held") != std::string::npos);
        return false;
      }
      release_failed[i] = lease->release().ok() ? 0 : 1;
      return release_failed[i] == 0;
    });
  }
  const auto [rate, failures] = measured;
  // Client CPU per cycle: the whole process's, over the measurement (the busy processes are
  // children, not counted).
  const double seconds = std::chrono::duration<double>(Clock::now() - wall0).count();
  const double cpu_us =
      static_cast<double>((process_cpu_time() - cpu0).count()) / std::max(1.0, rate * seconds);
  fmt::print(
      "{:<8} throughput   {} {} lockers, distinct keys{}: fencelock {:>7.0f} cycles/s ({:.1f}x the "
      "sequential {:.0f})  cpu {:.1f} us/cycle ({:.2f}x the sequential {:.1f})  failures {} "
      "(held by an orphan: {}; refused after a release that said it was still held: {})\n",
      config.label, config.lockers, config.async ? "async" : "thread",
      config.busy > 0 ? fmt::format(", {} busy processes", config.busy) : std::string(), rate,
      rate / config.sequential_cycles_per_s, config.sequential_cycles_per_s, cpu_us,
      config.sequential_cpu_us > 0 ? cpu_us / config.sequential_cpu_us : 0.0,
      config.sequential_cpu_us, failures, locked.load(), locked_after_failed_release.load());
  nlohmann::json out = {
      {"backend", config.label},
      {"scenario", "throughput"},
      {"lockers", config.lockers},
      {"api", config.async ? "async" : "blocking"},
      {"busy_processes", config.busy},
      {"sequential_cpu_us_per_cycle", config.sequential_cpu_us},
      {"fencelock",
       {{"cycles_per_s", rate},
        {"cpu_us_per_cycle", cpu_us},
        {"failures", failures},
        {"failures_locked", locked.load()},
        {"failures_locked_after_failed_release", locked_after_failed_release.load()}}},
      {"sequential_cycles_per_s", config.sequential_cycles_per_s}};
#if FENCELOCK_HAS_ETCD
  if (config.uri.starts_with("etcd")) {
    EtcdBaseline bare(config.uri);
    auto [base_rate, base_failures] = concurrent_cycles(
        config.lockers, config.duration,
        [&](int t) { return bare.cycle(fmt::format("bench/throughput-base/{}", t)); });
    fmt::print(
        "{:<8} throughput   {} lockers, distinct keys: baseline  {:>7.0f} cycles/s  "
        "ratio {:.2f}x  failures {}\n",
        config.label, config.lockers, base_rate, rate / base_rate, base_failures);
    out["baseline"] = {{"cycles_per_s", base_rate}, {"failures", base_failures}};
  }
#endif
  return out;
}

}  // namespace fencelock::bench
