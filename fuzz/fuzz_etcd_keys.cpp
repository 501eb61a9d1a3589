// The etcd key layout and what etcd sends back (etcd/etcd_keys.h, etcd/etcd_version.h): keys read
// under a prefix (NAME/<lease hex>), lease ids, range ends, stored values and server versions.
// Properties: no crash; lock_name_of() accepts exactly NAME + '/' + 1..16 lower-case hex digits
// with a non-empty NAME, and own_key() of a lock reads back as that lock; lease_hex() is the
// lease's hex; prefix_end() bounds every key under the prefix; a version reads back the same.
#include <charconv>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "etcd/etcd_keys.h"
#include "etcd/etcd_version.h"
#include "fuzz_check.h"

namespace fencelock::detail::etcd {
namespace {

void check_lock_name(std::string_view key) {
  const auto name = lock_name_of(key);
  const auto slash = key.rfind('/');
  const std::string_view hex = slash == key.npos ? key : key.substr(slash + 1);
  const bool in_layout = slash != key.npos && slash > 0 && !hex.empty() && hex.size() <= 16 &&
                         hex.find_first_not_of("0123456789abcdef") == hex.npos;
  FUZZ_CHECK(name.has_value() == in_layout);
  if (!name) return;
  FUZZ_CHECK(!name->empty() && lock_prefix(*name) + std::string(hex) == key);
  std::uint64_t lease = 0;
  auto [end, error] = std::from_chars(hex.data(), hex.data() + hex.size(), lease, 16);
  FUZZ_CHECK(error == std::errc() && end == hex.data() + hex.size());
  // etcd's client prints a lease without leading zeros: that spelling is the own key.
  if (hex.size() == 1 || hex.front() != '0') {
    FUZZ_CHECK(own_key(*name, static_cast<std::int64_t>(lease)) == key);
  }
}

void check_own_key(std::string_view name, std::int64_t lease) {
  const std::string hex = lease_hex(lease);
  std::uint64_t back = 0;
  auto [end, error] = std::from_chars(hex.data(), hex.data() + hex.size(), back, 16);
  FUZZ_CHECK(error == std::errc() && end == hex.data() + hex.size());
  FUZZ_CHECK(back == static_cast<std::uint64_t>(lease));
  if (name.empty()) return;
  const std::string key = own_key(name, lease);
  const auto again = lock_name_of(key);
  FUZZ_CHECK(again && *again == name);
}

void check_prefix_end(const std::string& prefix) {
  const std::string end = prefix_end(prefix);
  if (prefix.find_first_not_of('\xff') == std::string::npos) {
    FUZZ_CHECK(end == std::string(1, '\0'));
    return;
  }
  // Every key under the prefix sorts before the range end, bytes compared unsigned (as etcd does).
  FUZZ_CHECK(prefix < end && prefix + std::string(64, '\xff') < end);
  FUZZ_CHECK(!end.starts_with(prefix));
}

void check_version(std::string_view text) {
  const auto version = parse_server_version(text);
  if (!version) return;
  FUZZ_CHECK(version->major >= 0 && version->minor >= 0 && version->patch >= 0);
  const std::string printed =
      fmt::format("{}.{}.{}", version->major, version->minor, version->patch);
  const auto again = parse_server_version(printed);
  FUZZ_CHECK(again && again->major == version->major && again->minor == version->minor &&
             again->patch == version->patch);
  (void)revokes_live_leases_after_a_leader_stall(*version);
}

}  // namespace
}  // namespace fencelock::detail::etcd

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace fencelock::detail::etcd;
  const std::string text(reinterpret_cast<const char*>(data), size);
  check_lock_name(text);
  check_prefix_end(text);
  check_version(text);
  const DecodedValue value = decode_value(text);
  FUZZ_CHECK(!value.owner_prefix.empty() || value.metadata.empty() ||
             text.find("\"owner\"") != std::string::npos);
  std::int64_t lease = 0;
  if (size >= sizeof lease) std::memcpy(&lease, data, sizeof lease);
  check_own_key(size >= sizeof lease ? text.substr(sizeof lease) : text, lease);
  return 0;
}
