// The PostgreSQL advisory key of a lock name (postgres/advisory_key.h): any lock name a caller
// passes. Properties: no crash; deterministic; a canonical decimal int64 name is its own key;
// every other name is the first 8 bytes of its SHA-256, big-endian.
#include <charconv>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "fuzz_check.h"
#include "postgres/advisory_key.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace fencelock::detail::postgres;
  const std::string_view name(reinterpret_cast<const char*>(data), size);
  const std::int64_t key = advisory_key(name);
  FUZZ_CHECK(advisory_key(std::string(name)) == key);

  std::int64_t value = 0;
  auto [end, error] = std::from_chars(name.data(), name.data() + name.size(), value);
  const bool canonical =
      error == std::errc() && end == name.data() + name.size() && fmt::format("{}", value) == name;
  if (canonical) {
    FUZZ_CHECK(key == value);
  } else {
    const auto digest = sha256(name);
    std::uint64_t first = 0;
    for (int i = 0; i < 8; ++i) first = (first << 8) | digest[i];
    FUZZ_CHECK(key == static_cast<std::int64_t>(first));
  }
  // Every int64's own text maps to itself.
  if (size >= sizeof value) {
    std::memcpy(&value, data, sizeof value);
    FUZZ_CHECK(advisory_key(fmt::format("{}", value)) == value);
  }
  return 0;
}
