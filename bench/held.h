// The `held` scenario: one Client holds N leases (distinct keys) with automatic renewal for a
// while. Measures what holding costs: renewal rounds and renewed leases per second (the Client's
// metrics), script requests per second the Redis servers served meanwhile (INFO commandstats,
// EVALSHA calls; Redis and Redlock only: the requests renewal actually sends), client CPU (user + sys) as a share of one
// core, and client memory per lease (resident set growth / N).
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
};

nlohmann::json run_held(const HeldConfig& config);

}  // namespace fencelock::bench
