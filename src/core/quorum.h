// Redlock arithmetic (pure: no I/O, no clocks read). See docs/PROTOCOLS.md, "Redis and Redlock" and
// the unit tests in tests/unit/quorum_test.cpp and tests/unit/round2_simulation_test.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>

#include "fencelock/types.h"

namespace fencelock::detail {

// Smallest number of instances that is a majority of n (n >= 1).
constexpr int quorum(int n) { return n / 2 + 1; }

// Clock-drift allowance for a TTL: ttl * drift_factor, rounded up, plus 2 ms.
std::chrono::milliseconds drift_allowance(std::chrono::milliseconds ttl, double drift_factor);

// The Redlock validity deadline of a grant whose request was sent at `sent`:
// sent + ttl - drift. (Equal to now + (ttl - elapsed - drift) for now = sent + elapsed.)
std::chrono::steady_clock::time_point validity_deadline(std::chrono::steady_clock::time_point sent,
                                                        std::chrono::milliseconds ttl,
                                                        double drift_factor);

// Round-1 token choice: the maximum of the counters returned by the instances that granted.
// nullopt when none granted. Counters are never 0 (script_replies.h refuses a counter of 0).
std::optional<FencingToken> select_token(std::span<const std::uint64_t> granted_counters);

// Whether a majority of n confirmed. Used for round 1 grants, round 2 and renewal.
constexpr bool has_quorum(int confirmed, int n) { return confirmed >= quorum(n); }

}  // namespace fencelock::detail
