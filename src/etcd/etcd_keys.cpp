#include "etcd/etcd_keys.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/holder_metadata.h"

namespace fencelock::detail::etcd {

std::string lock_prefix(std::string_view name) { return std::string(name) + "/"; }

std::string own_key(std::string_view name, std::int64_t lease) {
  return lock_prefix(name) + lease_hex(lease);
}

std::string lease_hex(std::int64_t lease) {
  return fmt::format("{:x}", static_cast<std::uint64_t>(lease));
}

std::string prefix_end(std::string prefix) {
  while (!prefix.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(prefix.back());
    if (last < 0xff) {
      ++last;
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');
}

std::optional<std::string_view> lock_name_of(std::string_view key) {
  auto slash = key.rfind('/');
  if (slash == std::string_view::npos || slash == 0) return std::nullopt;
  std::string_view hex = key.substr(slash + 1);
  if (hex.empty() || hex.size() > 16) return std::nullopt;
  for (char c : hex) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return std::nullopt;
  }
  return key.substr(0, slash);
}

std::string encode_value(std::string_view owner_short_hex, std::string_view metadata) {
  nlohmann::json value = {{"owner", owner_short_hex}};
  // Deeper metadata is stored as a string: embedded, it would be copied and dumped recursively
  // (core/holder_metadata.h).
  nlohmann::json parsed(nlohmann::json::value_t::discarded);
  if (json_nesting_within(metadata, kMaxMetadataNesting)) {
    parsed = nlohmann::json::parse(metadata, nullptr, /*allow_exceptions=*/false);
  }
  value["metadata"] = parsed.is_discarded() ? nlohmann::json(metadata) : std::move(parsed);
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

DecodedValue decode_value(std::string_view value) {
  // Any client can write the key: a value nested deeper than fencelock's own is not fencelock's.
  if (!json_nesting_within(value, kMaxMetadataNesting + 1)) return {};
  auto parsed = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object() || !parsed.contains("owner") ||
      !parsed["owner"].is_string()) {
    return {};
  }
  DecodedValue out{parsed["owner"].get<std::string>(), {}};
  if (parsed.contains("metadata")) {
    const auto& meta = parsed["metadata"];
    out.metadata = meta.is_string()
                       ? meta.get<std::string>()
                       : meta.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return out;
}

}  // namespace fencelock::detail::etcd
