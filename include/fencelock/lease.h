// fencelock/lease.h: one grant of a lock.
//
// A Lease is move-only. While it lives (and renew is on) the Client renews it every ttl/3.
// lost() fires as soon as the Client can no longer be sure it holds the lock, and no later than
// valid_until(); code that must not run without the lock checks lost() (or registers on_lost())
// and stops. The fencing token is what a resource should check (fence.h): it keeps the resource
// safe even when a holder is paused past its validity.
//
// release() is the fallible close: it returns a Status. The destructor releases best-effort,
// never throws, and never blocks longer than ClientOptions::release_timeout.
//
// Thread-safety: all const methods may be called from any thread concurrently with renewal.
// release() and the destructor must not race with each other (as for any object).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <stop_token>
#include <string_view>

#include "fencelock/status.h"
#include "fencelock/types.h"

namespace fencelock {

namespace detail {
struct LeaseState;
}
class ResourceKey;  // fencelock/fence.h

class Lease {
 public:
  Lease(Lease&&) noexcept;
  Lease& operator=(Lease&&) noexcept;
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease();

  // REQUIRES for every accessor: the Lease was not moved from.
  const LockKey& key() const;
  const OwnerId& owner() const;
  FencingToken token() const;
  // The token and the lock that issued it (types.h): what to present to a fence, so that a
  // resource fenced by this lock refuses the tokens of another. The issuer is the same for
  // every Client, in any process, that names the same lock on the same backend cluster.
  Fencing fencing() const;
  // steady_clock deadline before which no other client can be granted this key (conservative:
  // measured from the send time of the last successful acquire/renew, drift allowance subtracted).
  // Moves forward on each successful renewal.
  std::chrono::steady_clock::time_point valid_until() const;

  // Fires when the lease is lost or released. Never fires later than valid_until().
  std::stop_token lost() const;
  bool is_lost() const { return lost().stop_requested(); }
  // Runs `callback` once when lost() fires (at once, on this thread, if it already has). The
  // callback runs on a fencelock thread: keep it short and never call back into this Lease.
  // When many leases are lost together, every lost() fires before any of their callbacks run,
  // so a callback may run a moment after valid_until(); lost() itself never fires later. (A
  // std::stop_callback registered on lost() directly runs as it fires, on the same thread: keep
  // such a callback to setting a flag.)
  void on_lost(std::function<void()> callback);

  // Releases the lock (compare owner and delete). OK if released or already expired; an error
  // status if the server could not be reached (the lock then expires by its TTL).
  // After release() the Lease holds nothing and lost() has fired. A second call returns what the
  // first one did.
  Status release();
  // release() without blocking: returns at once; `done` runs exactly once, on a fencelock thread
  // (never inside this call), with what release() would have returned. The Lease may be
  // destroyed (or moved) right after the call: the release goes on. lost() has fired when this
  // call returns (before the servers are asked). REQUIRES: `done` is not empty.
  void release_async(std::function<void(Status)> done);

 private:
  friend class Client;
  friend class Election;
  friend Status etcd_fenced_put(const Lease& lease, const ResourceKey& key, std::string_view value);
  explicit Lease(std::shared_ptr<detail::LeaseState> state);
  std::shared_ptr<detail::LeaseState> state_;
};

}  // namespace fencelock
