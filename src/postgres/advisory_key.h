// The PostgreSQL advisory-lock key of a lock name (pure: no I/O).
//
// A name that is a canonical decimal int64 ("0", "12345", "-7"; no sign on zero, no leading
// zeros, no '+') is used as is, so that `SELECT pg_advisory_lock(12345)` in psql and fencelock's
// lock "12345" exclude each other. Any other name maps to the first 8 bytes of its SHA-256,
// big-endian, as a signed bigint.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace fencelock::detail::postgres {

std::int64_t advisory_key(std::string_view name);

// SHA-256 of `data` (FIPS 180-4).
std::array<std::uint8_t, 32> sha256(std::string_view data);

}  // namespace fencelock::detail::postgres
