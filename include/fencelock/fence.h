// fencelock/fence.h: resource-side guards that check fencing tokens (docs/PROTOCOLS.md, "Fences").
//
// A lock alone cannot keep a resource safe: a holder paused past its TTL (GC, SIGSTOP, a slow
// disk) wakes up still believing it holds the lock. The resource must check the token of every
// write and refuse one older than a write it already accepted. Each guard below does that check
// and the write atomically, at the resource, and reports a refusal as Code::kFenced with the
// message "rejected: stale token N < M" (N presented, M the highest seen): never a generic error.
//
//   auto lease = client.acquire(key, {.ttl = 10s});
//   fencelock::RedisFence fence = *fencelock::RedisFence::connect("redis://127.0.0.1:6379");
//   Status wrote = fence.set(fencelock::ResourceKey("reports/latest"), report, lease->fencing());
//   if (wrote.code() == fencelock::Code::kFenced) { /* a newer holder wrote: stop */ }
//
// One resource, one lock. Tokens of two locks do not compare (an etcd revision 60 and a Redis
// token 4 are unrelated counters), so a fence record remembers the lock that issued its token
// (Fencing::issuer, from Lease::fencing()) and refuses the token of another lock with kFenced,
// "rejected: token N of lock 'P' cannot be compared with the tokens of lock 'R', which fences
// this resource ...", whether it is older or newer: a mix-up of locks is a refusal that names
// both, never a silent "stale" nor a silent overwrite. The calls that take a bare FencingToken
// present it unnamed, for programs with one lock:
// - a record written unnamed (a bare token, or a record written before records named their
//   issuer) compares tokens only, as before; the first named token that passes that comparison
//   names the record, which from then on belongs to its lock;
// - a named record refuses every bare token (it cannot tell which lock issued it): kFenced
//   "rejected: token N names no lock (a bare token) ...".
// Moving a resource to another lock on purpose is an administrator's act, after every writer of
// the old lock has stopped: RedisFence::adopt() (or reset()), an UPDATE of fencelock_fences on
// PostgreSQL, FenceGate::adopt(); docs/PROTOCOLS.md, "Fences".
//
// Guards, and what each protects (docs/PROTOCOLS.md, "Fences"):
// - FenceGate: in-process, for a service that owns its storage (any backend's tokens).
//   Read-modify-write: admit() before the read, run() for the write.
// - RedisFence: Lua scripts on the resource's Redis. set() writes the data key only if the token
//   is >= the highest admitted for that key and of the same lock (the record
//   "fencelock:fence:<key>"); get(key, fencing) is a fenced read that admits its token the same
//   way. Read-modify-write is protected only when the read is get(key, fencing): with an
//   unfenced read (peek()) two holders can both read 10 and both write 11.
// - PostgresFence (fencelock/postgres_fence.h, which includes libpq): fencelock_fence(resource,
//   token, issuer), called inside the user's transaction before its reads and writes: raises
//   SQLSTATE FL001 (stale) or FL003 (another lock; the transaction aborts), and otherwise holds
//   the fence row until commit, so the check, the reads after it and the write commit together
//   (read-modify-write protected). Refused outside a transaction.
// - etcd_fenced_put(): a Txn that writes only while the lease's own lock key still exists with
//   its create revision (the token): is-still-holder, checked by etcd itself. A write succeeds
//   only while no later holder can exist, so a read-modify-write whose write is fenced is safe.
//   It keeps no record, so no issuer: only the lease's own lock can pass.
//
// A guarded resource is named by a ResourceKey, not a string, so that a key and a value cannot be
// swapped in a call (set(value, key, token) does not compile).
//
// Tokens are canonical unsigned 64-bit integers everywhere and compare exactly over the whole
// range (no floating point); a token or a record that is not one is an error, never compared.
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

#include "fencelock/config.h"
#include "fencelock/lease.h"
#include "fencelock/options.h"
#include "fencelock/status.h"
#include "fencelock/types.h"

namespace fencelock {

// The Status every guard returns for a refused write: kFenced, "rejected: stale token N < M".
Status stale_token(FencingToken presented, FencingToken highest);
// The Status every guard returns for a token of another lock than the one whose record it holds
// (`recorded`: the record's highest token and its issuer): kFenced, naming both locks.
Status other_lock(const Fencing& presented, const Fencing& recorded);

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

// An in-process monotonic gate: admits a token only if it is >= every token admitted before,
// and (when named) of the lock whose tokens it admitted (the rules at the top of this file).
class FenceGate {
 public:
  FenceGate();
  ~FenceGate();
  FenceGate(const FenceGate&) = delete;
  FenceGate& operator=(const FenceGate&) = delete;

  // Records `fencing` and returns OK when its token is >= highest() and its issuer may pass;
  // kFenced otherwise (stale_token() or other_lock()). kInvalidArgument for an issuer that
  // Lease::fencing() cannot return (not printable ASCII, too long).
  Status admit(const Fencing& fencing);
  // admit(fencing), then runs `write` while still holding the gate, so no write with an older
  // token can start until it returns. kFenced without running `write` when refused.
  Status run(const Fencing& fencing, const std::function<void()>& write);
  // A bare token: admit(Fencing{token, ""}), run(Fencing{token, ""}, write).
  Status admit(FencingToken token);
  Status run(FencingToken token, const std::function<void()>& write);
  // The highest token admitted so far (0 before the first).
  FencingToken highest() const;
  // The highest token and the issuer of the record ("" while unnamed).
  Fencing record() const;
  // Administrative: the gate's record becomes `fencing` unconditionally (its lock's tokens
  // from fencing.token on pass, every other lock's are refused). For moving the resource to
  // another lock once every writer of the old one has stopped.
  Status adopt(const Fencing& fencing);

 private:
  struct State;  // the record and the mutex guarding it (src/core/fence.cpp)
  std::unique_ptr<State> state_;
};

#if FENCELOCK_HAS_REDIS  // fencelock/config.h: built with FENCELOCK_WITH_REDIS
class RedisFence {
 public:
  // redis://[user:pass@]host:port[/db] (password also from FENCELOCK_REDIS_PASSWORD).
  // kInvalidArgument for another scheme, kUnavailable / kUnauthenticated as for Client::connect.
  static Result<RedisFence> connect(std::string_view uri, const ClientOptions& options = {});

  // Atomically: if the token is >= the highest token admitted for `key` and the issuer may pass
  // (the rules at the top of this file), records it and sets key = value (OK); otherwise
  // kFenced and nothing changes. kInvalidArgument for a data key in fencelock's namespace
  // ("fencelock:") or an issuer Lease::fencing() cannot return. kUnavailable when Redis cannot be
  // reached (the write may or may not have happened: retrying with the same token is safe).
  // kInternal when the fence record is not one fencelock writes (someone else wrote it).
  Status set(const ResourceKey& key, std::string_view value, const Fencing& fencing);
  // A fenced read: atomically, if the fencing passes as for set(), records it and returns the
  // value (nullopt when missing); otherwise kFenced. After it, every write or read with an older
  // token is refused: the read of a read-modify-write.
  Result<std::optional<std::string>> get(const ResourceKey& key, const Fencing& fencing);
  // A bare token (unnamed): set(key, value, Fencing{token, ""}), get(key, Fencing{token, ""}).
  Status set(const ResourceKey& key, std::string_view value, FencingToken token);
  Result<std::optional<std::string>> get(const ResourceKey& key, FencingToken token);
  // An unfenced read of `key` (nullopt when missing), for display and monitoring. Never the
  // read of a read-modify-write: a holder that lost its lock may read and then write with it.
  Result<std::optional<std::string>> peek(const ResourceKey& key);
  // The highest token admitted for `key` (0 when none).
  Result<FencingToken> highest(const ResourceKey& key);
  // The record of `key`: its highest token and issuer ("" while unnamed); token 0 and "" when
  // there is none.
  Result<Fencing> record(const ResourceKey& key);

  // Administrative, for moving `key` to another lock once every writer of the old lock has
  // stopped. adopt(): the record becomes `fencing` unconditionally, so that lock's tokens from
  // fencing.token on pass and every other lock's are refused (take a lease of the new lock and
  // adopt with its fencing()). reset(): the record is deleted, so the next token of any lock
  // is admitted (and names the record). Neither touches the data key.
  Status adopt(const ResourceKey& key, const Fencing& fencing);
  Status reset(const ResourceKey& key);

  // The Lua source of the guarded write, for programs that issue their own EVAL:
  // KEYS[1] data key, KEYS[2] fence record ("fencelock:fence:" + data key); ARGV[1] token
  // (canonical decimal), ARGV[2] value, ARGV[3] issuer (absent or empty: a bare token).
  // Returns {1, token} when written, {0, highest} when stale, {2, highest, recorded issuer} for
  // a token of another lock (or a bare token against a named record).
  static std::string_view script();
  // The Lua source of the fenced read: KEYS as script(), ARGV[1] token, ARGV[2] issuer.
  // Returns {1, value or nil} when admitted, {0, highest} / {2, highest, issuer} as script().
  static std::string_view read_script();

 private:
  struct Impl;
  explicit RedisFence(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};
#endif  // FENCELOCK_HAS_REDIS

// etcd only (the lease must come from an etcd:// Client): puts key = value only while the
// lease's lock key still exists with create revision == lease.token(). kFenced ("rejected: stale
// token N < M", M the current holder's token; or "its lock key is gone" when no later holder
// exists) when it does not. kInvalidArgument, writing nothing, for a lease of another backend,
// a lease that was released, and a data key where locks live: under the lock's own prefix
// "NAME/" (a key there would join the lock's line as a holder nobody can release) or, when the
// URI sets namespace=PREFIX/, anywhere under PREFIX/.
Status etcd_fenced_put(const Lease& lease, const ResourceKey& key, std::string_view value);

}  // namespace fencelock
