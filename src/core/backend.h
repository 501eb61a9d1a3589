// Backend: the interface every lock service implements (redis::Redlock, memory::Backend, ...).
//
// The Client owns the contract of fencelock/client.h (local queue, renewal, lost signalling);
// a Backend only speaks its protocol. Every method is blocking and safe to call from several
// threads at once. What only some backends offer is a capability (ReleaseEvents, ServerQueue,
// BatchedTries, BatchedReleases, GuardedWrites, ElectionBackend) that the Backend hands out, or
// nullptr. Every call that may wait on a server takes a deadline (list: ListBounds::deadline;
// observe, which runs until stopped: a stop token) and returns by it, whatever the servers do: a
// backend may end sooner by its own bounds (ClientOptions::io_timeout per request, a share of the
// TTL), never later. (One exception: a PostgreSQL advisory session's health check, once started,
// gets its io_timeout, since one cut short would close the session and every lock on it; none
// starts past the deadline.) The callers in the core give a call that is one request now +
// io_timeout, and an acquisition its own deadline.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <vector>

#include "core/saturate.h"
#include "fencelock/election.h"
#include "fencelock/status.h"
#include "fencelock/types.h"

namespace fencelock::detail {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A holder as a backend read it from its server. `key` is the name the server stores: a foreign
// writer (or a client of another library) can leave one that is no valid LockKey (empty, longer
// than LockKey::kMaxBytes, or with a NUL byte); Client::list skips those (and logs a warning).
struct HolderRow {
  std::string key;
  std::string owner_prefix;  // OwnerId::short_hex() of the holder
  std::optional<FencingToken> token;
  milliseconds ttl_remaining{0};
  std::string metadata;
  bool session_bound = false;  // HolderInfo::session_bound
};

// The HolderInfo of every row whose key is a valid LockKey, in their order; one warning to the log
// sink says how many were left out (Client::list).
std::vector<HolderInfo> holders_of(std::vector<HolderRow> rows);

struct GrantRequest {
  const LockKey& key;
  const OwnerId& owner;
  milliseconds ttl;
  const std::string& metadata;
  // Fair waiting: when not granted, keep a place in the key's wait queue this long (0: try once,
  // take no place). Backends without a queue ignore it.
  milliseconds queue_for{0};
  // The place: smaller goes first. The same on every attempt of one acquisition and on every
  // instance, so that all instances agree on who is first.
  std::uint64_t ticket = 0;
};

struct Grant {
  FencingToken token{0};
  Clock::time_point valid_until;
  // The backend's own name for what the grant holds, handed back to renew_all() (RenewItem) and
  // release_grant(): etcd's own key NAME/<lease hex> (guarded_put() needs it), the lock value of
  // the granted attempt on Redis. Empty when the backend needs none.
  std::string backend_key;
  // The key was held by another owner when this acquisition began: it waited for a release.
  bool contended = false;
  // Requested by the backend when it learns, outside any renewal, that the grant is gone (the
  // PostgreSQL session holding an advisory lock was closed): the Client fires lost() at once
  // instead of at the next renewal. Default: never requested.
  std::stop_token gone;
};

// The outcome of one try: a Grant, or an error. On kLocked, `retry_after` is the holder's
// remaining TTL (the fallback wake-up for a holder that dies without releasing).
struct TryResult {
  Status status;
  std::optional<Grant> grant;
  milliseconds retry_after{0};
};

struct RenewItem {
  const LockKey* key;
  const OwnerId* owner;
  milliseconds ttl;
  // When the lease's lost() fires unless this renewal is confirmed first (its validity minus
  // the watchdog's guard): a confirmation after it is of no use.
  Clock::time_point renew_by = Clock::time_point::max();
  // Grant::backend_key of the lease (nullptr: none).
  const std::string* backend_key = nullptr;
};

// The time the core gives a call that is one request (a try, inspect, leader, making a watch):
// io_timeout for the request, and room to fail over to two more servers (an etcd member that
// does not answer); a backend's own bounds may end it sooner.
inline milliseconds request_budget(milliseconds io_timeout) {
  return io_timeout * 3;  // io_timeout <= kMaxDuration: no overflow
}
inline Clock::time_point request_deadline(milliseconds io_timeout) {
  return deadline_after(Clock::now(), request_budget(io_timeout));
}

// Per item of a renew_all() call.
struct RenewOutcome {
  enum Kind {
    kRenewed,   // confirmed: valid_until is the new validity
    kRejected,  // definitely gone: expired or taken over on enough servers that no quorum can
                // confirm
    kUnknown,   // not confirmed (servers unreachable or slow): retry; the lease stays valid until
                // its old valid_until, when the watchdog declares it lost
  };
  Kind kind = kUnknown;
  Clock::time_point valid_until{};
};

// A subscription to release events of one key, taken before the try that may fail so that a
// release between the try and the wait is never missed.
class ReleaseWatch {
 public:
  virtual ~ReleaseWatch() = default;
  // Blocks until a release event arrived since this watch was made (or since the last wait that
  // returned true), `until` passes, or `stop` fires. True on an event.
  virtual bool wait_until(Clock::time_point until, std::stop_token stop) = 0;
  // For waiting without a thread (an asynchronous acquisition): calls `wake` on every release
  // event after this call, from the thread that hears it (keep it short; never call into this
  // watch from it), until the watch is destroyed (a call already under way may end just after).
  // Call at most once. False if this watch cannot: the caller then wakes on its timers alone.
  virtual bool set_waker(
      std::function<void()> wake) {  // NOLINT(performance-unnecessary-value-param)
    (void)wake;                      // an overrider keeps it
    return false;
  }
};

// One acquisition as the Client hands it to a backend (after the local queue).
struct AcquireCall {
  const LockKey& key;
  const OwnerId& owner;
  milliseconds ttl;
  const std::string& metadata;
  milliseconds wait;           // 0: try once
  Clock::time_point deadline;  // start + wait
  std::stop_token stop;
  milliseconds io_timeout;  // for the give-up release
  bool shared = false;      // REQUIRES: supports_shared()
  // A campaign (election.h): `metadata` is the campaigner's value, stored verbatim.
  // REQUIRES: elections() != nullptr
  bool campaign = false;
  // Every request of the acquisition ends by it (a ServerQueue backend's try_acquire passes its
  // deadline here); its wait is call.deadline.
  Clock::time_point io_until = Clock::time_point::max();
};

// Capabilities: what a backend may offer beyond the base interface, each an interface of its own
// that the Backend hands out (Backend::release_events() and the others below; nullptr: not
// offered). The core asks for one where it would use it; no backend implements a capability it
// lacks with a dummy.

// Release events of a key (Redis pub/sub, PostgreSQL LISTEN/NOTIFY, the in-process table of
// memory://): a waiter between tries wakes on them. Without it a waiter tries again at the
// holder's remaining TTL (TryResult::retry_after) only.
class ReleaseEvents {
 public:
  virtual ~ReleaseEvents() = default;
  // `owner` is the waiter: a backend that addresses wake-ups to the first waiter in line wakes
  // this watch only for releases addressed to it (or to nobody in particular).
  // `deadline` bounds what making the watch may wait for (Redis: the subscription confirmed);
  // past it the watch is made anyway and its waiter wakes on its timers.
  virtual std::unique_ptr<ReleaseWatch> watch(const LockKey& key, const OwnerId& owner,
                                              Clock::time_point deadline) = 0;
};

// A wait queue on the server (PostgreSQL advisory locks, an etcd mutex): a waiting acquisition
// is one call that returns once granted, not a series of tries. (Asynchronous acquisitions run
// it on a thread of its own while it waits, until the engine speaks these protocols without
// blocking.)
class ServerQueue {
 public:
  virtual ~ServerQueue() = default;
  // Takes the lock, waiting in the server's queue up to call.deadline. kLocked when the wait ran
  // out, kCancelled when call.stop fired; either way nothing of this owner is left behind.
  virtual Result<Grant> acquire_queued(const AcquireCall& call) = 0;
};

// Tries sent together: the asynchronous engine gathers the tries that come due at once and sends
// them through try_acquire_many (one write per server).
class BatchedTries {
 public:
  virtual ~BatchedTries() = default;
  // One result per request, in order, each as Backend::try_acquire would give it, and each
  // within `budget` of the moment it is sent (a backend may send a batch in parts, one after
  // another: a deadline fixed before the first would leave the later parts no time).
  virtual std::vector<TryResult> try_acquire_many(std::span<const GrantRequest> requests,
                                                  milliseconds budget) = 0;
  // Whether tries with this TTL go through try_acquire_many (a short TTL cannot wait for a
  // batch: its validity would pass before the batch is handed back).
  virtual bool batches_tries(milliseconds ttl) const = 0;
};

// A grant to release: Backend::release_grant's arguments.
struct ReleaseRequest {
  LockKey key;
  OwnerId owner;
  std::string backend_key;
  milliseconds ttl;
};

// Releases sent together: the asynchronous engine gathers the releases that come due at once
// (Lease::release_async) and sends them through release_many (one write per server).
class BatchedReleases {
 public:
  virtual ~BatchedReleases() = default;
  // One status per request, in order, each as Backend::release_grant would give it, and each
  // within `budget` of the moment it is sent.
  virtual std::vector<Status> release_many(std::span<const ReleaseRequest> requests,
                                           milliseconds budget) = 0;
};

// Writes guarded by the holder's grant, checked by the lock's own server (etcd_fenced_put).
class GuardedWrites {
 public:
  virtual ~GuardedWrites() = default;
  // Writes key = value only while the grant named `backend_key` (Grant::backend_key) still holds
  // with `token`. kFenced when it does not.
  virtual Status guarded_put(const std::string& backend_key, FencingToken token,
                             std::string_view key, std::string_view value,
                             Clock::time_point deadline) = 0;
};

// What a backend with leader elections (etcd) offers beyond locks. A campaign is an acquisition
// with AcquireCall::campaign set (through ServerQueue); resigning is release().
class ElectionBackend {
 public:
  virtual ~ElectionBackend() = default;
  // Replaces the value of `owner`'s key in election `name` if it still leads (compare create
  // revision). kLocked when it does not.
  virtual Status proclaim(const LockKey& name, const OwnerId& owner, std::string_view value,
                          Clock::time_point deadline) = 0;
  virtual Result<std::optional<LeaderInfo>> leader(const LockKey& name,
                                                   Clock::time_point deadline) = 0;
  // See Election::observe.
  virtual Status observe(const LockKey& name,
                         const std::function<void(const std::optional<LeaderInfo>&)>& on_change,
                         std::stop_token stop) = 0;
};

// The bounds of one list call (Client::list's ListOptions, as a deadline).
struct ListBounds {
  Clock::time_point deadline;
  std::size_t max_locks = 0;
};

// list()'s answer when more than `max_locks` locks match `prefix`.
Status too_many_locks(std::size_t max_locks, std::string_view prefix);
// list()'s answer when its deadline passed after `pages` pages.
Status list_out_of_time(std::size_t pages, std::size_t found);

class Backend {
 public:
  virtual ~Backend() = default;

  // The capabilities it offers (above); nullptr: not offered. A backend without a ServerQueue
  // is acquired by tries (core/wait_loop.h, core/async_acquire.cpp).
  virtual ReleaseEvents* release_events() { return nullptr; }
  virtual ServerQueue* server_queue() { return nullptr; }
  virtual BatchedTries* batched_tries() { return nullptr; }
  virtual BatchedReleases* batched_releases() { return nullptr; }
  virtual GuardedWrites* guarded_writes() { return nullptr; }
  virtual ElectionBackend* elections() { return nullptr; }

  // Smallest TTL the backend can honour.
  virtual milliseconds min_ttl() const = 0;
  // Whether AcquireOptions::shared (reader locks) is available.
  virtual bool supports_shared() const { return false; }
  // Whether this backend can store a lock name (or a list prefix): kInvalidArgument saying why
  // not, before anything is sent. Default: every LockKey.
  virtual Status check_name(std::string_view) const { return Status::Ok(); }

  // One attempt to take the lock, answered by `deadline` (a try that has not heard enough by then
  // fails as against unreachable servers). Never leaves a partial grant behind: on any failure
  // the backend has already released (by owner id) whatever it took, or will (Redis's release
  // finisher, for an instance that answered late).
  virtual TryResult try_acquire(const GrantRequest& request, Clock::time_point deadline) = 0;

  // Renews every item, batched per server, by `deadline` (an item not confirmed by then is
  // kUnknown; RenewItem::renew_by may end its part sooner). One outcome per item, in order.
  virtual std::vector<RenewOutcome> renew_all(std::span<const RenewItem> items,
                                              Clock::time_point deadline) = 0;

  // Gives up any place in the wait queue and releases what `owner` holds (compare owner and
  // delete; on Redis, whose lock values are fresh per attempt, a give-up holds nothing and only
  // leaves the queue), then wakes waiters. OK when the key is gone or owned by another. Also how
  // an acquisition that gives up leaves nothing behind.
  virtual Status release(const LockKey& key, const OwnerId& owner, Clock::time_point deadline) = 0;
  // Releases the grant a lease holds (`backend_key` is its Grant::backend_key, `ttl` the TTL it
  // was granted with). A backend whose lock value is fresh per attempt (Redis) deletes only that
  // grant; others release by owner.
  virtual Status release_grant(const LockKey& key, const OwnerId& owner,
                               const std::string& backend_key, milliseconds ttl,
                               Clock::time_point deadline) {
    (void)backend_key;
    (void)ttl;
    return release(key, owner, deadline);
  }

  virtual Result<std::optional<HolderRow>> inspect(const LockKey& key,
                                                   Clock::time_point deadline) = 0;
  // Bounded by bounds.deadline as a whole (every page, every server) and by bounds.max_locks:
  // once more names than that are found, too_many_locks() (no more pages are read).
  virtual Result<std::vector<HolderRow>> list(std::string_view prefix,
                                              const ListBounds& bounds) = 0;

  // The backend's URI without credentials.
  virtual std::string describe() const = 0;

  // The identity of the cluster whose counters issue this backend's tokens, as a fence issuer
  // names it (Fencing::issuer, core/fence_issuer.h): the same for every Client of the same
  // cluster in any process. Empty: the core derives it from the URI (redis://, redlock://,
  // memory://).
  virtual std::string issuer_identity() const { return {}; }
  // The name under which that cluster counts `key`'s tokens (etcd: with the URI's namespace).
  virtual std::string issuer_name(const LockKey& key) const { return key.str(); }

  // Connections reopened after a failure so far (MetricsSnapshot::reconnects).
  virtual std::uint64_t reconnects() const { return 0; }
};

}  // namespace fencelock::detail
