#include "core/quorum.h"

#include <algorithm>
#include <cmath>

#include "core/saturate.h"

namespace fencelock::detail {

std::chrono::milliseconds drift_allowance(std::chrono::milliseconds ttl, double drift_factor) {
  auto scaled =
      static_cast<std::int64_t>(std::ceil(static_cast<double>(ttl.count()) * drift_factor));
  return std::chrono::milliseconds(scaled + 2);
}

std::chrono::steady_clock::time_point validity_deadline(std::chrono::steady_clock::time_point sent,
                                                        std::chrono::milliseconds ttl,
                                                        double drift_factor) {
  return deadline_after(sent, ttl - drift_allowance(ttl, drift_factor));
}

std::optional<FencingToken> select_token(std::span<const std::uint64_t> granted_counters) {
  if (granted_counters.empty()) return std::nullopt;
  return FencingToken(*std::max_element(granted_counters.begin(), granted_counters.end()));
}

}  // namespace fencelock::detail
