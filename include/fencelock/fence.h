// fencelock/fence.h: resource-side guards that check fencing tokens (DESIGN.md section 5).
//
// A lock alone cannot keep a resource safe: a holder paused past its TTL (GC, SIGSTOP, a slow
// disk) wakes up still believing it holds the lock. The resource must check the token of every
// write and refuse one older than a write it already accepted. Each guard below does that check
// and the write atomically, at the resource, and reports a refusal as Code::kFenced with the
// message "rejected: stale token N < M" (N presented, M the highest seen): never a generic error.
//
//   auto lease = client.acquire(key, {.ttl = 10s});
//   fencelock::RedisFence fence = *fencelock::RedisFence::connect("redis://127.0.0.1:6379");
//   Status wrote = fence.set(fencelock::ResourceKey("reports/latest"), report, lease->token());
//   if (wrote.code() == fencelock::Code::kFenced) { /* a newer holder wrote: stop */ }
//
// Guards, and what each protects (docs/PROTOCOLS.md, "Fences"):
// - FenceGate: in-process, for a service that owns its storage (any backend's tokens).
//   Read-modify-write: admit(token) before the read, run(token, write) for the write.
// - RedisFence: Lua scripts on the resource's Redis. set() writes the data key only if the token
//   is >= the highest admitted for that key (kept in "fencelock:fence:<key>"); get(key, token)
//   is a fenced read that admits its token the same way. Read-modify-write is protected only
//   when the read is get(key, token): with an unfenced read (peek()) two holders can both read
//   10 and both write 11. Any backend's tokens; one key must be fenced by one lock's tokens.
// - PostgresFence (fencelock/postgres_fence.h, which includes libpq): fencelock_fence(resource,
// token), called inside the user's transaction before
//   its reads and writes: raises SQLSTATE FL001 (the transaction aborts) for a stale token, and
//   otherwise holds the fence row until commit, so the check, the reads after it and the write
//   commit together (read-modify-write protected). Refused outside a transaction.
// - etcd_fenced_put(): a Txn that writes only while the lease's own lock key still exists with
//   its create revision (the token): is-still-holder, checked by etcd itself. A write succeeds
//   only while no later holder can exist, so a read-modify-write whose write is fenced is safe.
//
// A guarded resource is named by a ResourceKey, not a string, so that a key and a value cannot be
// swapped in a call (set(value, key, token) does not compile).
//
// Tokens are canonical unsigned 64-bit integers everywhere and compare exactly over the whole
// range (no floating point).
//
// Thread-safety: FenceGate is thread-safe. A RedisFence may be used from many threads (calls are
// serialized on its connection). PostgresFence functions use the caller's connection, which the
// caller must not share across threads.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "fencelock/lease.h"
#include "fencelock/options.h"
#include "fencelock/status.h"
#include "fencelock/types.h"

namespace fencelock {

// The Status every guard returns for a refused write: kFenced, "rejected: stale token N < M".
Status stale_token(FencingToken presented, FencingToken highest);

// The name of a resource a fence guards: a Redis data key, an etcd key. Its own type so that it
// cannot be confused with the value written to it.
class ResourceKey {
 public:
  explicit ResourceKey(std::string_view name) : name_(name) {}
  const std::string& str() const { return name_; }
  friend bool operator==(const ResourceKey&, const ResourceKey&) = default;

 private:
  std::string name_;
};

// An in-process monotonic gate: admits a token only if it is >= every token admitted before.
class FenceGate {
 public:
  FenceGate();
  ~FenceGate();
  FenceGate(const FenceGate&) = delete;
  FenceGate& operator=(const FenceGate&) = delete;

  // Records `token` and returns OK when token >= highest(); kFenced otherwise.
  Status admit(FencingToken token);
  // admit(token), then runs `write` while still holding the gate, so no write with an older
  // token can start until it returns. kFenced without running `write` when stale.
  Status run(FencingToken token, const std::function<void()>& write);
  // The highest token admitted so far (0 before the first).
  FencingToken highest() const;

 private:
  struct State;  // the highest token and the mutex guarding it (src/core/fence.cpp)
  std::unique_ptr<State> state_;
};

class RedisFence {
 public:
  // redis://[user:pass@]host:port[/db] (password also from FENCELOCK_REDIS_PASSWORD).
  // kInvalidArgument for another scheme, kUnavailable / kUnauthenticated as for Client::connect.
  static Result<RedisFence> connect(std::string_view uri, const ClientOptions& options = {});

  // Atomically: if token >= the highest token admitted for `key`, records token and sets
  // key = value (OK); otherwise kFenced and nothing changes. kUnavailable when Redis cannot be
  // reached (the write may or may not have happened: retrying with the same token is safe).
  // kInternal when the fence record is not a canonical token (someone else wrote it).
  Status set(const ResourceKey& key, std::string_view value, FencingToken token);
  // A fenced read: atomically, if token >= the highest token admitted for `key`, records token
  // and returns the value (nullopt when missing); otherwise kFenced. After it, every write or
  // read with an older token is refused: the read of a read-modify-write.
  Result<std::optional<std::string>> get(const ResourceKey& key, FencingToken token);
  // An unfenced read of `key` (nullopt when missing), for display and monitoring. Never the
  // read of a read-modify-write: a holder that lost its lock may read and then write with it.
  Result<std::optional<std::string>> peek(const ResourceKey& key);
  // The highest token admitted for `key` (0 when none).
  Result<FencingToken> highest(const ResourceKey& key);

  // The Lua source of the guarded write, for programs that issue their own EVAL:
  // KEYS[1] data key, KEYS[2] fence key; ARGV[1] token (canonical decimal), ARGV[2] value.
  // Returns {1, token} when written, {0, highest} when stale.
  static std::string_view script();
  // The Lua source of the fenced read: KEYS as script(), ARGV[1] token.
  // Returns {1, value or nil} when admitted, {0, highest} when stale.
  static std::string_view read_script();

 private:
  struct Impl;
  explicit RedisFence(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

// etcd only (the lease must come from an etcd:// Client): puts key = value only while the
// lease's lock key still exists with create revision == lease.token(). kFenced ("rejected: stale
// token N < M", M the current holder's token, or 0 when nobody holds it) when it does not;
// kInvalidArgument for a lease of another backend or a released one.
Status etcd_fenced_put(const Lease& lease, const ResourceKey& key, std::string_view value);

}  // namespace fencelock
