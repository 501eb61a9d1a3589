// Durations as the CLI and URI options take them (core/duration.h): "250ms", "10s", "2m", "596h".
// Properties: no crash; a duration is accepted exactly when it is digits and one of the units
// ms, s, m, h and at most kMaxDuration; format_duration() reads back as the same duration when
// it prints a whole number of its unit.
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "core/duration.h"
#include "fencelock/options.h"
#include "fuzz_check.h"

namespace fencelock::detail {
namespace {

// The reference reading: digits, then a unit; nullopt for anything else. Values past the cap
// come back as kMaxDuration + 1 ms.
std::optional<std::int64_t> reference_ms(std::string_view text) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0) return std::nullopt;
  const std::string_view unit = text.substr(digits);
  std::int64_t scale = unit == "ms"  ? 1
                       : unit == "s" ? 1000
                       : unit == "m" ? 60'000
                       : unit == "h" ? 3'600'000
                                     : 0;
  if (scale == 0) return std::nullopt;
  const std::int64_t over = kMaxDuration.count() + 1;
  std::int64_t value = 0;
  for (char c : text.substr(0, digits)) {
    value = value * 10 + (c - '0');
    if (value * scale >= over) return over;
  }
  return value * scale;
}

void check_round_trip(std::chrono::milliseconds d) {
  const std::string text = format_duration(d);
  FUZZ_CHECK(!text.empty());
  if (d.count() < 0 || d > kMaxDuration || text.find('.') != std::string::npos) return;
  auto again = parse_duration(text);
  FUZZ_CHECK(again.ok() && *again == d);
}

}  // namespace
}  // namespace fencelock::detail

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace fencelock::detail;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = parse_duration(text);
  const auto expected = reference_ms(text);
  const bool acceptable = expected && *expected <= fencelock::kMaxDuration.count();
  FUZZ_CHECK(parsed.ok() == acceptable);
  if (parsed.ok()) {
    FUZZ_CHECK(parsed->count() >= 0 && *parsed <= fencelock::kMaxDuration);
    FUZZ_CHECK(parsed->count() == *expected);
    check_round_trip(*parsed);
  } else {
    FUZZ_CHECK(parsed.code() == fencelock::Code::kInvalidArgument);
  }
  // Any count at all formats without a crash (negative and huge ones included).
  if (size >= sizeof(std::int64_t)) {
    std::int64_t raw = 0;
    std::memcpy(&raw, data, sizeof raw);
    check_round_trip(std::chrono::milliseconds(raw));
    check_round_trip(std::chrono::milliseconds(raw % (fencelock::kMaxDuration.count() + 1)));
  }
  return 0;
}
