// The `waiters` scenario: N pending asynchronous acquisitions (Client::acquire_async) on N
// distinct keys, each held by another Client, then every holder released at once. Measures what
// waiting costs: threads of the process while N wait (against the count before), memory per
// pending acquisition (resident set growth / N), the requests the servers received during a
// window of the wait once every acquisition had made its first try (Redis and Redlock: script
// calls, summed over the instances; other backends: not counted), and, after the
// releases, release-to-grant latency p50/p99 and how many waiters were granted. Nothing else may
// use the servers meanwhile.
#pragma once

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

namespace fencelock::bench {

struct WaitersConfig {
  std::string label;
  std::string uri;
  int waiters = 1000;
  std::chrono::milliseconds ttl{30'000};
  // The window of the wait whose server requests are counted (after the first tries).
  std::chrono::milliseconds window{10'000};
};

nlohmann::json run_waiters(const WaitersConfig& config);

}  // namespace fencelock::bench
