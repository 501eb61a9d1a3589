#include "held.h"

#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fmt/format.h>

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
  for (const auto& ep : endpoints_of(uri)) {
    auto colon = ep.rfind(':');
    redisContext* c = redisConnect(ep.substr(0, colon).c_str(), std::stoi(ep.substr(colon + 1)));
    if (c == nullptr || c->err) {
      if (c != nullptr) redisFree(c);
      continue;
    }
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
    redisFree(c);
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
      "lost {}\n",
      config.label, config.leases, config.ttl.count() / 1000, rounds / seconds, renewed / seconds,
      servers > 0 ? fmt::format("{:.1f} ({:.1f} per server)", per_round, per_server_round) : "n/a",
      100 * cpu_share, bytes_per_lease, lost);
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
                        {"lost", lost}};
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
