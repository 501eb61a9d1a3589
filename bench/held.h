// The `held` scenario: one Client holds N leases (distinct keys) with automatic renewal for a
// while. Measures what holding costs: renewal rounds and renewed leases per second (the Client's
// metrics), the requests the servers served meanwhile, per renewal round and per server (Redis:
// EVALSHA calls and their server time from INFO commandstats; PostgreSQL: committed
// transactions from pg_stat_database; etcd: LeaseKeepAlive messages from each member's
// /metrics, read with curl), client CPU (user + sys) as a share of one core, and client memory
// per lease (resident set growth / N). Then, still holding the N leases, it takes short probe
// leases with renewal off and reports how late their lost() fired relative to valid_until()
// (the contract: never later; the contract in docs/PROTOCOLS.md: independent of N). Nothing else
// may use the servers meanwhile.
#pragma once

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

namespace fencelock::bench {

struct HeldConfig {
  std::string label;
  std::string uri;
  int leases = 1000;
  std::chrono::milliseconds ttl{30'000};
  std::chrono::milliseconds duration{30'000};  // how long the leases are held once all are taken
  // Probe leases taken after that window, one every lost_probe_spacing (TTL 20 ms, or the
  // backend's minimum when longer: PostgreSQL 1 s, etcd 2 s).
  int lost_probes = 250;
  std::chrono::milliseconds lost_probe_spacing{10};
  // Last, stop renewing and record when lost() fires on all N leases at once (they were renewed
  // in step, so they come due together), next to the probes' one-at-a-time figure.
  bool lose_all = true;
};

nlohmann::json run_held(const HeldConfig& config);

}  // namespace fencelock::bench
