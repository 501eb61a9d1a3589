// ClientCore: the shared state behind a Client and its Leases (backend, local queue, renewer,
// metrics).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>

#include "core/backend.h"
#include "core/engine.h"
#include "core/lease_state.h"
#include "core/local_queue.h"
#include "core/metrics.h"
#include "core/mutex.h"
#include "core/renewer.h"
#include "core/token_history.h"
#include "core/try_batcher.h"
#include "fencelock/client.h"
#include "fencelock/options.h"

namespace fencelock::detail {

class ClientCore : public std::enable_shared_from_this<ClientCore> {
 public:
  // `issuer_identity`: the backend's identity in fence issuers (core/fence_issuer.h), used when
  // the backend names none itself (Backend::issuer_identity()).
  ClientCore(std::unique_ptr<Backend> backend, ClientOptions options,
             std::string issuer_identity = {});

  // `campaign`: an election campaign (AcquireCall::campaign); options.metadata is the value.
  // Every call is recorded in metrics(), whatever its outcome.
  Result<std::shared_ptr<LeaseState>> acquire(const LockKey& key, const AcquireOptions& options,
                                              bool campaign = false);
  // The asynchronous acquire (Client::acquire_async): returns at once; `done` runs exactly once,
  // on an engine thread, with what acquire() would have returned. Recorded in metrics().
  using AcquireDone = std::function<void(Result<std::shared_ptr<LeaseState>>)>;
  void acquire_async(const LockKey& key, const AcquireOptions& options, AcquireDone done,
                     bool campaign = false);
  // Pending asynchronous acquisitions give up with kCancelled, leaving nothing held (the last
  // Client handle went). Later ones are cancelled at once.
  void cancel_pending() { closing_.request_stop(); }
  std::stop_token closing() const { return closing_.get_token(); }
  // A completion callback (acquire_async's `done`, release_async's) runs between these two, on
  // an engine thread.
  void callback_begin();
  void callback_end();
  // Returns once no completion callback is running (the last Client handle going: a callback
  // under way may be posting to a program's executor that the program destroys next, at its
  // exit). Returns at once on an engine thread (a callback that drops the last handle).
  void wait_for_callbacks();
  // The threads of acquire_async and Lease::release_async (started on first use).
  Engine& engine();
  static constexpr int kEngineThreads = 2;
  // Where asynchronous acquisitions send their tries when the backend batches them.
  TryBatcher& tries() { return tries_; }

  // What both acquire paths share. check_acquire: the argument checks before anything is sent.
  Status check_acquire(const LockKey& key, const AcquireOptions& options, bool campaign) const;
  // The holder metadata an acquisition sends.
  const std::string& metadata_for(const AcquireOptions& options, bool campaign) const {
    return options.metadata.empty() && !campaign ? default_metadata_ : options.metadata;
  }
  // The largest token this Client was granted for `key` (refuse_backwards()).
  std::uint64_t granted_before(const LockKey& key) const { return tokens_.largest(key.str()); }
  // The Lease state of a grant: refused when its token went backwards, else renewed and
  // counted as held. `contended` gains the grant's own flag.
  Result<std::shared_ptr<LeaseState>> lease_from_grant(const LockKey& key, const OwnerId& owner,
                                                       const AcquireOptions& options, Grant grant,
                                                       std::uint64_t granted_before,
                                                       bool& contended);
  // Records one finished acquisition; a kLocked status comes back naming the key.
  Result<std::shared_ptr<LeaseState>> record_acquire(const LockKey& key,
                                                     Result<std::shared_ptr<LeaseState>> result,
                                                     bool waited, Clock::duration took,
                                                     bool contended);

  // Stops renewal, fires lost(), then compare-and-deletes on the servers before `deadline`.
  // Recorded in metrics(); a failure is logged (kInfo).
  Status release(LeaseState& lease, Clock::time_point deadline);
  // release() without blocking: stops renewal and fires lost() now, then hands the release to
  // the engine: through the Client's ReleaseBatcher where the backend has BatchedReleases
  // (releases that come due together go out as one call, within io_timeout of being sent), else
  // as a task of its own. `done` runs on the engine with its status, after the metrics and the
  // log. REQUIRES: `self` is this core (kept alive until `done` has run).
  void release_async(const std::shared_ptr<ClientCore>& self, std::shared_ptr<LeaseState> lease,
                     std::function<void(Status)> done);
  // The Lease of `lease` is gone without a release (release_timeout 0): its key no longer counts
  // as held by this Client in kLocked messages.
  void forget_held(const LeaseState& lease);

  Backend& backend() { return *backend_; }
  Renewer& renewer() { return renewer_; }
  LocalQueue& queue() { return queue_; }
  const ClientOptions& options() const { return options_; }
  // Fencing::issuer of this Client's leases of `key`.
  std::string fence_issuer(const LockKey& key) const;
  const Metrics& metrics() const { return metrics_; }
  // The counters of metrics() plus the backend's own (reconnects).
  MetricsSnapshot metrics_snapshot() const;

 private:
  Status validate(const AcquireOptions& options) const;
  // A release's metrics and, when it failed, its log line.
  void released(const LeaseState& lease, const Status& status, Clock::duration took);
  Result<std::shared_ptr<LeaseState>> acquire_unrecorded(const LockKey& key,
                                                         const AcquireOptions& options,
                                                         bool campaign, bool& contended);
  Result<std::shared_ptr<LeaseState>> acquire_as_head(const LockKey& key,
                                                      const AcquireOptions& options,
                                                      Clock::time_point deadline, bool campaign,
                                                      bool& contended);
  // A kLocked status that names the key, and says so when this Client itself holds it (locks
  // are not reentrant: a user who takes a key twice meets it here).
  Status explain_locked(const LockKey& key, const Status& status) const;
  // A grant whose token is not above `granted_before` (TokenHistory): released, and refused
  // with kUnavailable.
  Status refuse_backwards(const LockKey& key, const OwnerId& owner, const Grant& grant,
                          milliseconds ttl, std::uint64_t granted_before);

  // Declaration order is destruction order reversed: the renewer stops before the backend and
  // the metrics it records into go.
  std::unique_ptr<Backend> backend_;
  const ClientOptions options_;
  const std::string default_metadata_;
  const std::string issuer_identity_;
  Metrics metrics_;
  TokenHistory tokens_;  // the largest token granted per key, for refuse_backwards()
  mutable Mutex held_mu_;
  // The keys of this Client's unreleased leases, with their tokens (explain_locked()).
  std::multimap<std::string, std::uint64_t> held_ FENCELOCK_GUARDED_BY(held_mu_);
  LocalQueue queue_;
  Renewer renewer_;
  std::stop_source closing_;
  std::once_flag engine_started_;
  Mutex callbacks_mu_;
  std::condition_variable_any callbacks_done_;
  int callbacks_running_ FENCELOCK_GUARDED_BY(callbacks_mu_) = 0;
  TryBatcher tries_{*backend_, [this]() -> Engine& { return engine(); }};
  ReleaseBatcher releases_{*backend_, [this]() -> Engine& { return engine(); }};
  // Last: it goes first, before anything its tasks use.
  std::unique_ptr<Engine> engine_;
};

struct ClientAccess {
  static ClientCore& core(Client& client) { return *client.core_; }
};

// {"host":"...","pid":123,"program":"..."} for this process.
std::string process_metadata();

}  // namespace fencelock::detail
