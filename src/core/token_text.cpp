#include "core/token_text.h"

#include <charconv>

namespace fencelock::detail {

std::optional<std::uint64_t> parse_canonical_token(std::string_view text) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  if (text.size() > 1 && text.front() == '0') return std::nullopt;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  std::uint64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace fencelock::detail
