// Duration-valued command line options ("500ms", "10s", "2m"; a bare "0" also means zero).
#pragma once

#include <chrono>
#include <string_view>

#include "fencelock/status.h"

namespace fencelock::cli {

// kInvalidArgument naming the option, e.g. "--ttl: invalid duration '10x': unknown unit ...".
Result<std::chrono::milliseconds> parse_duration_option(std::string_view option,
                                                        std::string_view text);

}  // namespace fencelock::cli
