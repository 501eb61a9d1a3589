#include "core/duration.h"

#include <charconv>
#include <cstdint>

#include <fmt/format.h>

#include "fencelock/options.h"

namespace fencelock::detail {

Result<std::chrono::milliseconds> parse_duration(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return Status(Code::kInvalidArgument,
                  fmt::format("invalid duration '{}': {} (examples: 500ms, 10s, 2m)", text, why));
  };
  if (text.empty()) return bad("empty");
  bool negative = text.front() == '-';
  std::string_view digits = negative ? text.substr(1) : text;
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  // The longest every backend can represent (fencelock/options.h); longer would overflow a
  // deadline or PostgreSQL's lock_timeout.
  const std::string too_large =
      fmt::format("too large (at most {}, the longest every backend can represent)",
                  format_duration(kMaxDuration));
  if (ec == std::errc::result_out_of_range) return bad(negative ? "negative" : too_large);
  if (ec != std::errc() || end == digits.data()) return bad("expected a whole number and a unit");
  std::string_view unit(end, digits.data() + digits.size() - end);
  std::int64_t scale = 0;
  if (unit == "ms")
    scale = 1;
  else if (unit == "s")
    scale = 1000;
  else if (unit == "m")
    scale = 60'000;
  else if (unit == "h")
    scale = 3'600'000;
  else if (unit.empty())
    return bad("missing unit");
  else
    return bad("unknown unit (use ms, s, m or h)");
  if (negative) return bad("negative");
  // value <= floor(max / scale) implies value * scale <= max: one check, and no overflow.
  if (value > kMaxDuration.count() / scale) return bad(too_large);
  return std::chrono::milliseconds(value * scale);
}

std::string format_duration(std::chrono::milliseconds d) {
  auto ms = d.count();
  if (ms != 0 && ms % 3'600'000 == 0) return fmt::format("{}h", ms / 3'600'000);
  if (ms != 0 && ms % 60'000 == 0) return fmt::format("{}m", ms / 60'000);
  if (ms >= 1000 && ms % 1000 == 0) return fmt::format("{}s", ms / 1000);
  if (ms >= 1000) return fmt::format("{:.1f}s", static_cast<double>(ms) / 1000.0);
  return fmt::format("{}ms", ms);
}

}  // namespace fencelock::detail
