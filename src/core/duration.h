// Parsing of human durations for the CLI and URIs (pure): "500ms", "10s", "2m", "1h", "250us"
// is rejected (milliseconds are the finest unit). A bare number is rejected too: the unit is
// required so that "10" cannot mean seconds to one reader and milliseconds to another.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "fencelock/status.h"

namespace fencelock::detail {

Result<std::chrono::milliseconds> parse_duration(std::string_view text);
// "1.5s", "250ms", "2m": the inverse for display (not necessarily the input's spelling).
std::string format_duration(std::chrono::milliseconds d);

}  // namespace fencelock::detail
