// fencelock/types.h: distinct types for the distinct things a lock is made of.
//
// LockKey, OwnerId and FencingToken cannot be mixed up: none converts implicitly from a string or
// an integer, so passing a key where an owner belongs does not compile.
//
// Thread-safety: all are immutable values once built.
#pragma once

#include <array>
#include <chrono>
#include <compare>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include "fencelock/status.h"

namespace fencelock {

// The name of a lock: 1..512 bytes, any bytes except NUL.
class LockKey {
 public:
  static constexpr std::size_t kMaxBytes = 512;

  // InvalidArgument when empty, longer than kMaxBytes, or containing a NUL byte.
  static Result<LockKey> make(std::string_view name);

  const std::string& str() const { return name_; }
  friend bool operator==(const LockKey&, const LockKey&) = default;
  // NOLINTNEXTLINE(modernize-use-nullptr): as FencingToken's below (llvm/llvm-project#53961)
  friend auto operator<=>(const LockKey&, const LockKey&) = default;

 private:
  explicit LockKey(std::string name) : name_(std::move(name)) {}
  std::string name_;
};

// A 128-bit random id naming one grant's holder. Drawn from the OS CSPRNG (getrandom), never a
// counter. Only the holder of the id can renew or release the grant. Log short_hex(), never hex().
class OwnerId {
 public:
  static OwnerId random();
  // InvalidArgument unless `hex` is 32 lower-case hex digits.
  static Result<OwnerId> from_hex(std::string_view hex);

  std::string hex() const;        // 32 hex digits: the value stored on the server
  std::string short_hex() const;  // first 8 hex digits: safe to log and show
  friend bool operator==(const OwnerId&, const OwnerId&) = default;

 private:
  OwnerId() = default;
  std::array<std::uint8_t, 16> bytes_{};
};

// A fencing token: strictly increasing across successive grants of one key on one backend cluster.
// Never 0. Resources compare tokens to reject writes from stale holders (see fence.h).
class FencingToken {
 public:
  constexpr explicit FencingToken(std::uint64_t value) : value_(value) {}
  constexpr std::uint64_t value() const { return value_; }
  // clang-tidy 14 reports the literal 0 of the comparison it synthesizes (llvm/llvm-project#53961).
  // NOLINTNEXTLINE(modernize-use-nullptr)
  friend constexpr auto operator<=>(FencingToken, FencingToken) = default;
  // The decimal value, as the CLI prints it ($FENCELOCK_TOKEN). fmt: fencelock/fmt.h.
  friend std::ostream& operator<<(std::ostream& out, FencingToken token) {
    return out << token.value_;
  }

 private:
  std::uint64_t value_;
};

// A fencing token together with the lock that issued it, as a fence (fence.h) records it: the
// counters of two locks are unrelated (an etcd revision 60 says nothing about a Redis token 4),
// so a resource fenced by one lock refuses the tokens of another. Lease::fencing() builds it.
//
// `issuer` names the lock: the identity of the backend cluster that counts its tokens, one
// space, then the lock's name there, both with every byte outside '!'..'~' and '%' written %XX,
// e.g. "redis://127.0.0.1:6379/0 reports/nightly" (docs/PROTOCOLS.md, "Fences", says what
// counts as the same issuer). Empty: unnamed, a bare token, as the fence calls that take a
// FencingToken present it (fence.h says how fences treat one).
struct Fencing {
  static constexpr std::size_t kMaxIssuerBytes = 32768;
  FencingToken token{0};
  std::string issuer;
  friend bool operator==(const Fencing&, const Fencing&) = default;
};

// What inspect() and list() report about a held lock. list() leaves out what a server holds under
// a name that is not a LockKey (written by another client: empty, too long, with a NUL byte) and
// logs a warning saying how many.
struct HolderInfo {
  LockKey key;
  std::string owner_prefix;  // OwnerId::short_hex() of the holder
  // nullopt when the backend cannot tell (a foreign Redlock client's lock, a psql session's
  // advisory lock); a token, when there is one, is never 0.
  std::optional<FencingToken> token;
  std::chrono::milliseconds ttl_remaining{0};
  std::string metadata;  // holder metadata as JSON text, e.g. {"host":"a","pid":7}; may be empty
  // Held for as long as the holder's database session lives, with no expiry of its own
  // (PostgreSQL advisory mode): ttl_remaining is then 0 and means nothing.
  bool session_bound = false;
};

}  // namespace fencelock
