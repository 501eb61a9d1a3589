#include "held.h"

#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/client_core.h"
#include "core/mutex.h"
#include "fencelock/client.h"
#include "fencelock/metrics.h"
#include "postgres/postgres_uri.h"
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

// What the servers of one backend served so far, summed over its servers.
struct ServerCount {
  double requests = 0;  // requests that renewal sends (see server_requests)
  double busy_us = 0;   // Redis only: server time spent in those requests
  int servers = 0;      // servers that answered
};

// Redis and Redlock: EVALSHA calls and their server time (INFO commandstats); renewal is one
// script call per batch. Requests, not the commands the scripts run inside.
ServerCount redis_requests(const std::string& uri) {
  ServerCount out;
  std::vector<HiredisContext> connections;
  try {
    connections = redis_connections(uri, {});
  } catch (const std::runtime_error&) {
    return out;  // no count: the caller reports none
  }
  for (auto& owned : connections) {
    redisContext* c = owned.get();
    auto* reply = static_cast<redisReply*>(redisCommand(c, "INFO commandstats"));
    if (reply != nullptr && reply->type == REDIS_REPLY_STRING) {
      std::string text(reply->str, reply->len);
      auto at = text.find("cmdstat_evalsha:calls=");
      if (at != std::string::npos) {
        out.requests += std::stod(text.substr(at + 22));
        auto usec = text.find("usec=", at);
        if (usec != std::string::npos) out.busy_us += std::stod(text.substr(usec + 5));
      }
      out.servers++;
    }
    if (reply != nullptr) freeReplyObject(reply);
  }
  return out;
}

// PostgreSQL: committed transactions of the database (pg_stat_database.xact_commit). Every
// statement fencelock sends outside a wait is one transaction, and while leases are only held
// the only statements are renewals (lease mode) or session health checks (advisory mode).
// PostgreSQL 15 publishes a backend's counters when it goes idle, at most once a second, and an
// idle backend with pending counts flushes them within PGSTAT_IDLE_INTERVAL (10 s): run_held
// lets the acquisitions' counts settle first.
ServerCount postgres_requests(const std::string& uri) {
  ServerCount out;
  auto split = detail::postgres::split_postgres_uri(uri);
  if (!split.ok()) return out;
  PGconn* c = PQconnectdb(split->conninfo.c_str());
  if (PQstatus(c) == CONNECTION_OK) {
    PGresult* r = PQexec(c,
                         "SELECT pg_stat_force_next_flush(), xact_commit FROM pg_stat_database "
                         "WHERE datname = current_database()");
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
      out.requests = std::stod(PQgetvalue(r, 0, 1));
      out.servers = 1;
    }
    PQclear(r);
  }
  PQfinish(c);
  return out;
}

// Standard output of a program run with `argv` (no shell), or "" when it cannot be run.
std::string output_of(const std::vector<std::string>& argv) {
  int fds[2];
  if (::pipe(fds) != 0) return "";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int spawned = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  std::string out;
  char buffer[4096];
  for (ssize_t n; spawned == 0 && (n = ::read(fds[0], buffer, sizeof buffer)) > 0;) {
    out.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  if (spawned == 0) ::waitpid(pid, nullptr, 0);
  return out;
}

// etcd: LeaseKeepAlive messages the members received (their /metrics, read with curl).
ServerCount etcd_requests(const std::string& uri) {
  ServerCount out;
  const std::string series =
      "grpc_server_msg_received_total{grpc_method=\"LeaseKeepAlive\",grpc_service=\"etcdserverpb."
      "Lease\",grpc_type=\"bidi_stream\"} ";
  for (const auto& ep : endpoints_of(uri)) {
    std::istringstream lines(
        output_of({"curl", "-s", "--max-time", "5", fmt::format("http://{}/metrics", ep)}));
    for (std::string line; std::getline(lines, line);) {
      if (line.starts_with(series)) {
        out.requests += std::stod(line.substr(series.size()));
        out.servers++;
      }
    }
  }
  return out;
}

ServerCount server_requests(const std::string& uri) {
  if (uri.starts_with("redis://") || uri.starts_with("redlock://")) return redis_requests(uri);
  if (uri.starts_with("postgres")) return postgres_requests(uri);
  if (uri.starts_with("etcd://")) return etcd_requests(uri);
  return {};
}

// The probe leases' TTL: 20 ms, or the backend's minimum TTL where that is longer.
std::chrono::milliseconds probe_ttl(const std::string& uri) {
  if (uri.starts_with("postgres")) return std::chrono::milliseconds(1'000);
  if (uri.starts_with("etcd://")) return std::chrono::milliseconds(2'000);
  return std::chrono::milliseconds(20);
}

// When lost() fired relative to valid_until() for short leases taken while the others are held.
struct Lateness {
  int probes = 0;
  int late = 0;          // fired after valid_until()
  int granted_late = 0;  // of those, granted after valid_until() (the backend held up the grant)
  int missing = 0;       // did not fire within a second after valid_until()
  double worst_ms = 0;   // max over the probes that fired of (fired_at - valid_until); < 0: early
  double worst_in_time_ms = 0;  // the same over the probes granted before valid_until()
};

// Takes `count` probe leases with renewal off, one every `spacing`, so that the watchdog is
// what declares each lost, and records when lost() fired. the contract in docs/PROTOCOLS.md: that
// time must not depend on how many leases the Client holds.
Lateness measure_lost_lateness(Client& client, int leases, std::chrono::milliseconds ttl, int count,
                               Clock::duration spacing) {
  struct Probe {
    Clock::time_point valid_until;
    Clock::time_point granted_at;               // when acquire() returned
    std::optional<Clock::time_point> fired_at;  // guarded by `mu` below (a local: not annotated)
  };
  fencelock::detail::Mutex mu;
  std::condition_variable_any fired;
  std::deque<Probe> probes;  // stable addresses for the callbacks; outlives `held`
  std::vector<Lease> held;
  const auto start = Clock::now();
  for (int i = 0; i < count; ++i) {
    std::this_thread::sleep_until(start + i * spacing);
    auto key = LockKey::make(fmt::format("bench/held/{}/probe/{}", leases, i));
    auto lease = client.acquire(*key, {.ttl = ttl, .renew = false});
    const auto granted_at = Clock::now();
    if (!lease.ok()) throw std::runtime_error("held: probe lease: " + lease.status().to_string());
    Probe* probe = nullptr;
    {
      fencelock::detail::MutexLock lock(mu);
      probe = &probes.emplace_back(Probe{lease->valid_until(), granted_at, std::nullopt});
    }
    lease->on_lost([&mu, &fired, probe] {
      fencelock::detail::MutexLock lock(mu);
      probe->fired_at = Clock::now();
      fired.notify_all();
    });
    held.push_back(std::move(*lease));
  }
  fencelock::detail::MutexLock lock(mu);
  const auto bound =
      probes.empty() ? Clock::now() : probes.back().valid_until + std::chrono::seconds(1);
  fired.wait_until(lock, bound, [&] {
    return std::all_of(probes.begin(), probes.end(),
                       [](const Probe& p) { return p.fired_at.has_value(); });
  });
  Lateness out;
  out.worst_ms = std::numeric_limits<double>::lowest();
  out.worst_in_time_ms = std::numeric_limits<double>::lowest();
  for (const Probe& p : probes) {
    ++out.probes;
    if (!p.fired_at) {
      ++out.missing;
      continue;
    }
    const double late_ms =
        std::chrono::duration<double, std::milli>(*p.fired_at - p.valid_until).count();
    out.worst_ms = std::max(out.worst_ms, late_ms);
    if (late_ms > 0) ++out.late;
    if (p.granted_at > p.valid_until) {
      if (late_ms > 0) ++out.granted_late;
    } else {
      out.worst_in_time_ms = std::max(out.worst_in_time_ms, late_ms);
    }
  }
  if (out.worst_ms == std::numeric_limits<double>::lowest()) out.worst_ms = 0;
  if (out.worst_in_time_ms == std::numeric_limits<double>::lowest()) out.worst_in_time_ms = 0;
  lock.unlock();
  for (auto& lease : held) (void)lease.release();
  return out;
}

// When lost() fired on every held lease at once: renewals stop (as if every server stopped
// answering at the same moment) and the watchdog declares them all lost together.
struct Together {
  int leases = 0;
  int late = 0;            // fired after valid_until()
  int missing = 0;         // did not fire within two seconds after the last validity
  double latest_ms = 0;    // max of (fired_at - valid_until); < 0: early
  double earliest_ms = 0;  // min of the same: how early the first was signalled
  double spread_ms = 0;    // from the first signal to the last
};

Together measure_lost_together(Client& client, std::vector<Lease>& held) {
  struct Seen {
    std::atomic<Clock::rep> fired_at{0};  // 0: not yet
    Clock::time_point valid_until;
  };
  std::vector<Seen> seen(held.size());
  std::atomic<std::size_t> fired{0};
  for (std::size_t i = 0; i < held.size(); ++i) {
    Seen* entry = &seen[i];
    held[i].on_lost([entry, &fired] {
      entry->fired_at.store(Clock::now().time_since_epoch().count());
      fired.fetch_add(1);
    });
  }
  detail::ClientAccess::core(client).renewer().pause_renewals_for_testing(true);
  Clock::time_point last_validity = Clock::now();
  for (std::size_t i = 0; i < held.size(); ++i) {
    seen[i].valid_until = held[i].valid_until();  // renewals are paused: it stays
    last_validity = std::max(last_validity, seen[i].valid_until);
  }
  const auto bound = last_validity + std::chrono::seconds(2);
  while (fired.load() < held.size() && Clock::now() < bound) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Together out;
  out.leases = static_cast<int>(held.size());
  double first = std::numeric_limits<double>::max();
  double last = std::numeric_limits<double>::lowest();
  out.latest_ms = std::numeric_limits<double>::lowest();
  out.earliest_ms = std::numeric_limits<double>::max();
  for (const Seen& s : seen) {
    const Clock::rep at = s.fired_at.load();
    if (at == 0) {
      ++out.missing;
      continue;
    }
    const Clock::time_point fired_at{Clock::duration(at)};
    const double ms = std::chrono::duration<double, std::milli>(fired_at - s.valid_until).count();
    const double abs_ms =
        std::chrono::duration<double, std::milli>(fired_at.time_since_epoch()).count();
    out.late += ms > 0 ? 1 : 0;
    out.latest_ms = std::max(out.latest_ms, ms);
    out.earliest_ms = std::min(out.earliest_ms, ms);
    first = std::min(first, abs_ms);
    last = std::max(last, abs_ms);
  }
  if (out.missing == out.leases) out.latest_ms = out.earliest_ms = 0;
  out.spread_ms = out.missing == out.leases ? 0 : last - first;
  return out;
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
      throw std::runtime_error(
          fmt::format("held: lease {} of {}: {}", i, config.leases, lease.status().to_string()));
    }
    held.push_back(std::move(*lease));
    if ((i + 1) % 10'000 == 0) std::fprintf(stderr, "held: %d leases taken\n", i + 1);
  }
  const double take_seconds = std::chrono::duration<double>(Clock::now() - take_start).count();
  const double rss_held = resident_bytes();

  if (config.uri.starts_with("postgres")) std::this_thread::sleep_for(std::chrono::seconds(11));
  const MetricsSnapshot before = client->metrics();
  const ServerCount served_before = server_requests(config.uri);
  const auto cpu_before = process_cpu_time();
  const auto hold_start = Clock::now();
  std::this_thread::sleep_for(config.duration);
  const double seconds = std::chrono::duration<double>(Clock::now() - hold_start).count();
  const auto cpu = process_cpu_time() - cpu_before;
  const ServerCount served_after = server_requests(config.uri);
  const MetricsSnapshot after = client->metrics();

  std::size_t lost = 0;
  for (const auto& lease : held) lost += lease.is_lost() ? 1 : 0;
  // After the measured window, so that the probes count in neither its requests nor its CPU.
  const Lateness lateness = measure_lost_lateness(*client, config.leases, probe_ttl(config.uri),
                                                  config.lost_probes, config.lost_probe_spacing);
  const double rounds = static_cast<double>(after.renew_latency.count - before.renew_latency.count);
  const double renewed = static_cast<double>(after.renewals - before.renewals);
  const double cpu_share = static_cast<double>(cpu.count()) / 1e6 / seconds;
  const double bytes_per_lease = (rss_held - rss_before) / config.leases;
  const int servers = served_after.servers;
  const double requests = served_after.requests - served_before.requests;
  const double busy_us = served_after.busy_us - served_before.busy_us;
  // Per server and per renewal round: what the target "a few requests per instance per round"
  // is about. A round renews every lease that is due; leases taken over a long time fall due
  // at different times, so divide by the rounds a lease sees (hold time / (TTL / 3)) instead of
  // the renewer's wake-ups.
  const double lease_rounds = seconds / (static_cast<double>(config.ttl.count()) / 3000.0);
  const double per_round = lease_rounds > 0 ? requests / lease_rounds : 0;
  const double per_server_round = servers > 0 ? per_round / servers : 0;
  fmt::print(
      "{:<8} held         {} leases, TTL {} s: {:.2f} renewal wake-ups/s, {:.0f} leases renewed/s, "
      "{} requests per renewal round, client CPU {:.2f}% of a core, {:.0f} bytes/lease, "
      "lost {}, lost() of {} short leases (TTL {} ms, renewal off) at worst {:+.1f} ms after "
      "valid_until ({} late{}{})\n",
      config.label, config.leases, config.ttl.count() / 1000, rounds / seconds, renewed / seconds,
      servers > 0 ? fmt::format("{:.1f} ({:.1f} per server)", per_round, per_server_round) : "n/a",
      100 * cpu_share, bytes_per_lease, lost, lateness.probes, probe_ttl(config.uri).count(),
      lateness.worst_ms, lateness.late,
      lateness.granted_late > 0
          ? fmt::format(", {} of them granted after it; the others at worst {:+.1f} ms",
                        lateness.granted_late, lateness.worst_in_time_ms)
          : "",
      lateness.missing > 0 ? fmt::format(", {} never fired", lateness.missing) : "");
  nlohmann::json out = {{"backend", config.label},
                        {"scenario", "held"},
                        {"leases", config.leases},
                        {"ttl_ms", config.ttl.count()},
                        {"uri_options", config.uri.find('?') == std::string::npos
                                            ? ""
                                            : config.uri.substr(config.uri.find('?') + 1)},
                        {"seconds", seconds},
                        {"take_seconds", take_seconds},
                        {"renew_rounds_per_s", rounds / seconds},
                        {"leases_renewed_per_s", renewed / seconds},
                        {"client_cpu_share", cpu_share},
                        {"bytes_per_lease", bytes_per_lease},
                        {"renewal_failures", after.renewal_failures - before.renewal_failures},
                        {"lost", lost},
                        {"lost_probes", lateness.probes},
                        {"lost_probe_ttl_ms", probe_ttl(config.uri).count()},
                        {"lost_probes_late", lateness.late},
                        {"lost_probes_granted_late", lateness.granted_late},
                        {"lost_worst_granted_in_time_ms", lateness.worst_in_time_ms},
                        {"lost_probes_missing", lateness.missing},
                        {"lost_worst_after_valid_until_ms", lateness.worst_ms}};
  if (config.lose_all) {
    // Last: it stops the Client's renewals for good.
    const Together together = measure_lost_together(*client, held);
    fmt::print(
        "{:<8} lost together {} leases (renewals stopped): {} late, signals from {:+.1f} to "
        "{:+.1f} ms after valid_until over {:.1f} ms{}; one lease at a time (above): at worst "
        "{:+.1f} ms\n",
        config.label, together.leases, together.late, together.earliest_ms, together.latest_ms,
        together.spread_ms,
        together.missing > 0 ? fmt::format(", {} never fired", together.missing) : "",
        lateness.worst_ms);
    out["lost_together_leases"] = together.leases;
    out["lost_together_late"] = together.late;
    out["lost_together_missing"] = together.missing;
    out["lost_together_latest_after_valid_until_ms"] = together.latest_ms;
    out["lost_together_earliest_after_valid_until_ms"] = together.earliest_ms;
    out["lost_together_spread_ms"] = together.spread_ms;
  }
  if (servers > 0) {
    out["servers"] = servers;
    out["server_requests_per_s"] = requests / seconds;
    out["requests_per_round"] = per_round;
    out["requests_per_server_per_round"] = per_server_round;
  }
  if (busy_us > 0 && requests > 0) out["server_us_per_request"] = busy_us / requests;
  for (auto& lease : held) (void)lease.release();
  return out;
}

}  // namespace fencelock::bench
