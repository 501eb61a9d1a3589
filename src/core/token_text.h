// Fencing tokens as text: the one rule every fencelock component uses when a token crosses a
// wire or a script as a decimal string (the Redis scripts apply the same rule in
// src/redis/scripts/tokens.lua). Pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace fencelock::detail {

// The value of a canonical decimal token: "0", or a digit 1-9 followed by digits, at most 20
// digits and at most 2^64 - 1. nullopt for anything else (a sign, a leading zero, spaces, an
// empty string, a value out of range).
std::optional<std::uint64_t> parse_canonical_token(std::string_view text);

}  // namespace fencelock::detail
