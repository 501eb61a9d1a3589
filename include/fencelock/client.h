// fencelock/client.h: the entry point. One Client per backend cluster per process.
//
// clang-format off
//   auto client = fencelock::Client::connect("redlock://10.0.0.1,10.0.0.2,10.0.0.3");
//   if (!client) { std::cerr << client.status().to_string() << "\n"; return 69; }
//   auto key = fencelock::LockKey::make("reports/nightly");
//   auto lease = client->acquire(*key, {.ttl = 10s, .wait = 30s});
//   if (lease) write_with_fence(lease->token());
// clang-format on
//
// Backends are chosen by URI (redis://, redlock://, postgres://, etcd://, memory://; see
// docs/PROTOCOLS.md).
//
// Threads of one process that contend for one key queue locally in FIFO order; only the head of
// the queue talks to the servers. Waiting never polls: waiters wake on the backend's release
// event, with the holder's remaining TTL as the fallback for a holder that crashed.
//
// Signals: the first connect() sets SIGPIPE to SIG_IGN if it is still SIG_DFL (as gRPC does),
// because the Redis driver cannot stop a closed socket from raising it.
//
// Observability: metrics() counts what the Client did (fencelock/metrics.h); diagnostic messages
// go to the process-wide sink of fencelock/log.h (silent by default).
//
// Thread-safety: a Client is safe for concurrent use from many threads. Copies share one
// connection set, one renewal scheduler and one set of metrics; the last copy (and the last
// Lease) to go closes them.
#pragma once

#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fencelock/lease.h"
#include "fencelock/metrics.h"
#include "fencelock/options.h"
#include "fencelock/status.h"
#include "fencelock/types.h"

namespace fencelock {

namespace detail {
class ClientCore;
class ClientHandle;
struct ClientAccess;  // tests and tools inside the project reach the core through this
}  // namespace detail

class Client {
 public:
  // Connects to the backend named by `uri`. kInvalidArgument for a malformed URI,
  // kUnavailable when too few servers answer (Redlock: fewer than a majority),
  // kUnauthenticated for rejected credentials. Credentials never appear in messages.
  static Result<Client> connect(std::string_view uri, const ClientOptions& options = {});

  // Takes the lock. Returns a Lease, or: kLocked (held by someone else for the whole wait),
  // kCancelled (options.stop fired), kUnavailable (no quorum), kDeadlineExceeded,
  // kInvalidArgument (ttl <= 0 or below the backend minimum, wait < 0).
  // A failed, cancelled or timed-out call leaves nothing held on any server.
  Result<Lease> acquire(const LockKey& key, const AcquireOptions& options = {});

  // acquire() without blocking a thread of the caller's: returns at once; `done` runs exactly
  // once, on a fencelock thread (never inside this call), with what acquire() would have
  // returned. Same contract: local FIFO order with blocking callers, waiting on release events,
  // options.stop cancels (kCancelled), nothing held after a failure. A pending acquisition
  // waits as state on the Client's engine (two threads per Client, started by the first
  // asynchronous call), not on a thread; with postgres:// mode=advisory and etcd://, whose
  // servers queue the waiters, a call with a wait runs on a thread of its own while it waits.
  // When the last copy of this Client is destroyed, pending acquisitions complete with
  // kCancelled and leave nothing held (one granted at that very moment completes with its Lease,
  // as a blocking call granted before its stop does); the destructor of that last copy waits for
  // the `done` callbacks (and Lease::release_async's) running at that moment to return, unless
  // it runs inside one, so that no callback of the Client is still posting to a program's
  // executor that the program destroys next. `done` must be short or hand its work on: it runs
  // on a thread the Client's other acquisitions share. REQUIRES: `done` is not empty.
  void acquire_async(const LockKey& key, const AcquireOptions& options,
                     std::function<void(Result<Lease>)> done);
  // acquire_async() completing a future.
  std::future<Result<Lease>> acquire_future(const LockKey& key, const AcquireOptions& options = {});

  // The current holder of `key`, or nullopt when it is free.
  Result<std::optional<HolderInfo>> inspect(const LockKey& key);
  // Every held lock whose key starts with `prefix` (all when empty), sorted by key, within the
  // bounds of `options`: kDeadlineExceeded past options.timeout, kInvalidArgument when more than
  // options.max_locks match.
  Result<std::vector<HolderInfo>> list(std::string_view prefix = {},
                                       const ListOptions& options = {});

  // The URI with any password removed, e.g. "redlock://127.0.0.1:7001,127.0.0.1:7002".
  std::string describe() const;

  // Counters and latency histograms of everything this Client (and its copies and Leases) did
  // since connect(): a copy, taken without blocking any operation. Render it with
  // to_prometheus(client.metrics(), client.describe()).
  MetricsSnapshot metrics() const;

 private:
  friend struct detail::ClientAccess;
  explicit Client(std::shared_ptr<detail::ClientCore> core);
  std::shared_ptr<detail::ClientCore> core_;
  // Shared by the copies of this Client only (not its Leases): the last one to go cancels the
  // pending asynchronous acquisitions.
  std::shared_ptr<detail::ClientHandle> handle_;
};

}  // namespace fencelock
