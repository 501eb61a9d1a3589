#include "fencelock/types.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdlib>

#include <fmt/format.h>

namespace fencelock {
namespace {

constexpr char kHexDigits[] = "0123456789abcdef";

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

Result<LockKey> LockKey::make(std::string_view name) {
  if (name.empty()) return Status(Code::kInvalidArgument, "lock key is empty (use 1..512 bytes)");
  if (name.size() > kMaxBytes) {
    return Status(Code::kInvalidArgument, fmt::format("lock key is {} bytes long; the limit is {}",
                                                      name.size(), kMaxBytes));
  }
  if (name.find('\0') != std::string_view::npos) {
    return Status(Code::kInvalidArgument, "lock key contains a NUL byte");
  }
  return LockKey(std::string(name));
}

OwnerId OwnerId::random() {
  OwnerId id;
  std::size_t filled = 0;
  while (filled < id.bytes_.size()) {
    ssize_t n = getrandom(id.bytes_.data() + filled, id.bytes_.size() - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::abort();  // no CSPRNG: refusing to mint guessable owner ids is the only safe choice
    }
    filled += static_cast<std::size_t>(n);
  }
  return id;
}

Result<OwnerId> OwnerId::from_hex(std::string_view hex) {
  OwnerId id;
  if (hex.size() != 32) return Status(Code::kInvalidArgument, "owner id is not 32 hex digits");
  for (std::size_t i = 0; i < 16; ++i) {
    int hi = hex_value(hex[2 * i]);
    int lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return Status(Code::kInvalidArgument, "owner id is not 32 hex digits");
    id.bytes_[i] = static_cast<std::uint8_t>(hi * 16 + lo);
  }
  return id;
}

std::string OwnerId::hex() const {
  std::string out;
  out.reserve(32);
  for (auto b : bytes_) {
    out.push_back(kHexDigits[b >> 4]);
    out.push_back(kHexDigits[b & 0xf]);
  }
  return out;
}

std::string OwnerId::short_hex() const { return hex().substr(0, 8); }

}  // namespace fencelock
