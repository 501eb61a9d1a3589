#include "duration_option.h"

#include <fmt/format.h>

#include "core/duration.h"

namespace fencelock::cli {

Result<std::chrono::milliseconds> parse_duration_option(std::string_view option,
                                                        std::string_view text) {
  // Zero needs no unit: it means the same in all of them.
  if (text == "0") return std::chrono::milliseconds(0);
  auto parsed = detail::parse_duration(text);
  if (!parsed.ok()) {
    return Status(Code::kInvalidArgument, fmt::format("{}: {}", option, parsed.status().message()));
  }
  return *parsed;
}

}  // namespace fencelock::cli
