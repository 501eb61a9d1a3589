// Rendering of HolderInfo for `fencelock status` and `fencelock list` (pure: no I/O).
//
// Human output is for eyes (columns, "8.5s"); JSON output is the stable interface for scripts:
//   status: {"key":K,"held":false}  or
//           {"key":K,"held":true,"owner":"1a2b3c4d","token":42,"ttl_ms":8500,"holder":{...}}
//   list:   [ <held status object>, ... ]
// "token" is null when the backend cannot tell; "holder" is the holder's metadata object (a
// string if it is not valid JSON, null if there is none).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fencelock/types.h"

namespace fencelock::cli {

nlohmann::json holder_json(const HolderInfo& holder);
nlohmann::json status_json(const std::string& key, const std::optional<HolderInfo>& holder);

// "KEY: free", or "KEY: held" followed by indented owner/token/ttl/holder lines. Ends in '\n'.
std::string status_text(const std::string& key, const std::optional<HolderInfo>& holder);

// A table with a header line and one line per lock: KEY OWNER TOKEN TTL HOST PID. Ends in '\n'.
std::string list_table(const std::vector<HolderInfo>& holders);

}  // namespace fencelock::cli
