// The values a lock is named and owned by (fencelock/types.h, core/token_text.h): lock keys from
// callers and the CLI, owner ids and fencing tokens read back from servers.
// Properties: no crash; LockKey::make accepts exactly 1..kMaxBytes bytes without NUL and keeps
// them; OwnerId::from_hex accepts exactly 32 lower-case hex digits and hex() gives them back; a
// canonical token reads back to the same decimal text, and every uint64's text is canonical.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "core/token_text.h"
#include "fencelock/types.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using fencelock::LockKey;
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  auto key = LockKey::make(text);
  const bool valid_key =
      !text.empty() && text.size() <= LockKey::kMaxBytes && text.find('\0') == text.npos;
  FUZZ_CHECK(key.ok() == valid_key);
  if (key.ok()) {
    FUZZ_CHECK(key->str() == text && !key->str().empty());
    FUZZ_CHECK(key->str().size() <= LockKey::kMaxBytes);
  } else {
    FUZZ_CHECK(key.code() == fencelock::Code::kInvalidArgument);
  }

  auto owner = fencelock::OwnerId::from_hex(text);
  const bool valid_owner =
      text.size() == 32 && text.find_first_not_of("0123456789abcdef") == text.npos;
  FUZZ_CHECK(owner.ok() == valid_owner);
  if (owner.ok()) {
    FUZZ_CHECK(owner->hex() == text);
    FUZZ_CHECK(owner->short_hex() == text.substr(0, 8));
  }

  auto token = fencelock::detail::parse_canonical_token(text);
  if (token) FUZZ_CHECK(fmt::format("{}", *token) == text);
  if (size >= sizeof(std::uint64_t)) {
    std::uint64_t raw = 0;
    std::memcpy(&raw, data, sizeof raw);
    const auto again = fencelock::detail::parse_canonical_token(fmt::format("{}", raw));
    FUZZ_CHECK(again && *again == raw);
  }
  return 0;
}
