#include "conformance/harness.h"

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <limits>

#include <fmt/format.h>

#include "core/client_core.h"
#include "memory/memory_backend.h"
#include "postgres/advisory_key.h"
#include "redis/redis_keys.h"
#include "support/postgres_server.h"
#include "support/redis_server.h"

namespace fencelock::testing {

void Harness::cut_off(Client& holder, const std::string&) {
  detail::ClientAccess::core(holder).renewer().pause_renewals_for_testing(true);
}

namespace {

class MemoryHarness final : public Harness {
 public:
  MemoryHarness() {
    static std::atomic<int> next{0};
    name_ = fmt::format("conformance{}", next++);
  }
  std::string uri() override { return "memory://" + name_; }
  long long acquire_attempts(const std::string& key) override {
    return static_cast<long long>(detail::memory_stats(name_, key).attempts);
  }
  long long server_waiters(const std::string& key) override {
    return static_cast<long long>(detail::memory_stats(name_, key).watchers);
  }

 private:
  std::string name_;
};

// Redis counts script calls per command name, not per key: tests using these counters keep
// everything else quiet while they measure (one key, renewal far away).
class RedisHarness final : public Harness {
 public:
  explicit RedisHarness(int n) : cluster_(RedisCluster::start(n)) {}
  std::string uri() override {
    return cluster_->size() == 1 ? (*cluster_)[0].uri() : cluster_->redlock_uri();
  }
  long long acquire_attempts(const std::string&) override {
    long long most = 0;
    for (int i = 0; i < cluster_->size(); ++i)
      most = std::max(most, (*cluster_)[i].command_count("evalsha"));
    return most;
  }
  // Waiters in the key's wait queue (each remote waiter takes one place) on every instance: the
  // least. (The most said "waiting" once one instance had run a waiter's try while the others had
  // not: a release at that moment could reach the others first and grant that try at once, a
  // waiter that never waited.)
  long long server_waiters(const std::string& key) override {
    long long least = std::numeric_limits<long long>::max();
    for (int i = 0; i < cluster_->size(); ++i) {
      least = std::min(
          least,
          std::atoll((*cluster_)[i].command({"ZCARD", detail::redis::queue_key(key)}).c_str()));
    }
    return least;
  }

 private:
  std::unique_ptr<RedisCluster> cluster_;
};

// The server logs every statement: attempts are runs of lease_acquire.sql in its log (a refused
// run draws no token, so the token sequence does not count them). Waiters are the Clients that
// LISTEN for releases.
class PostgresLeaseHarness final : public Harness {
 public:
  PostgresLeaseHarness()
      : server_(PostgresServer::start({.extra_settings = {"log_statement=all"}})) {}
  std::string uri() override { return server_->uri() + "?mode=lease"; }
  long long acquire_attempts(const std::string&) override {
    std::ifstream log(server_->log_path());
    long long attempts = 0;
    for (std::string line; std::getline(log, line);) {
      // A line of lease_acquire.sql only (each run is logged once, over several lines).
      if (line.find("SET owner = $2, token = nextval('fencelock_tokens'),") != std::string::npos) {
        attempts++;
      }
    }
    return attempts;
  }
  std::chrono::milliseconds short_ttl() const override { return std::chrono::milliseconds(1000); }
  long long server_waiters(const std::string&) override {
    return std::atoll(server_
                          ->sql("SELECT count(*) FROM pg_stat_activity "
                                "WHERE query = 'LISTEN fencelock_release'")
                          .c_str());
  }

 private:
  std::unique_ptr<PostgresServer> server_;
};

// Advisory locks: the server logs every statement, so attempts are counted from its log (a
// polling waiter would show up there); waiters are sessions queued in pg_locks; cutting off or
// crashing a holder ends its session (pg_terminate_backend), which frees its locks at once.
class PostgresAdvisoryHarness final : public Harness {
 public:
  PostgresAdvisoryHarness()
      : server_(PostgresServer::start({.extra_settings = {"log_statement=all"}})) {}
  std::string uri() override { return server_->uri() + "?mode=advisory"; }
  std::chrono::milliseconds short_ttl() const override { return std::chrono::milliseconds(1000); }
  bool validity_bounds_exclusion() const override { return false; }
  long long acquire_attempts(const std::string&) override {
    std::ifstream log(server_->log_path());
    long long attempts = 0;
    for (std::string line; std::getline(log, line);) {
      if (line.find("pg_try_advisory_lock(") != std::string::npos ||
          line.find("pg_advisory_lock(") != std::string::npos) {
        attempts++;
      }
    }
    return attempts;
  }
  long long server_waiters(const std::string& key) override {
    return std::atoll(
        server_->sql("SELECT count(*) FROM pg_locks " + lock_filter(key, false)).c_str());
  }
  void cut_off(Client&, const std::string& key) override { end_holder_session(key); }
  void crashed(const std::string& key) override { end_holder_session(key); }

 private:
  static std::string lock_filter(const std::string& key, bool granted) {
    std::int64_t k = detail::postgres::advisory_key(key);
    return fmt::format(
        "WHERE locktype = 'advisory' AND {} granted AND objsubid = 1 AND classid = (({}::bigint >> "
        "32) & "
        "4294967295)::oid AND objid = ({}::bigint & 4294967295)::oid",
        granted ? "" : "NOT", k, k);
  }
  void end_holder_session(const std::string& key) {
    server_->sql("SELECT pg_terminate_backend(pid) FROM pg_locks " + lock_filter(key, true));
  }

  std::unique_ptr<PostgresServer> server_;
};

}  // namespace

std::unique_ptr<Harness> make_postgres_advisory_harness() {
  return std::make_unique<PostgresAdvisoryHarness>();
}

std::unique_ptr<Harness> make_postgres_lease_harness() {
  return std::make_unique<PostgresLeaseHarness>();
}

std::unique_ptr<Harness> make_memory_harness() { return std::make_unique<MemoryHarness>(); }
std::unique_ptr<Harness> make_redis_harness() { return std::make_unique<RedisHarness>(1); }
std::unique_ptr<Harness> make_redlock_harness() { return std::make_unique<RedisHarness>(3); }

}  // namespace fencelock::testing
