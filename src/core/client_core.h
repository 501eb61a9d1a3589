// ClientCore: the shared state behind a Client and its Leases (backend, local queue, renewer,
// metrics).
#pragma once

#include <memory>
#include <string>

#include "core/backend.h"
#include "core/lease_state.h"
#include "core/local_queue.h"
#include "core/metrics.h"
#include "core/renewer.h"
#include "core/token_history.h"
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
  // Stops renewal, fires lost(), then compare-and-deletes on the servers before `deadline`.
  // Recorded in metrics(); a failure is logged (kInfo).
  Status release(LeaseState& lease, Clock::time_point deadline);

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
  Result<std::shared_ptr<LeaseState>> acquire_unrecorded(const LockKey& key,
                                                         const AcquireOptions& options,
                                                         bool campaign, bool& contended);
  Result<std::shared_ptr<LeaseState>> acquire_as_head(const LockKey& key,
                                                      const AcquireOptions& options,
                                                      Clock::time_point deadline, bool campaign,
                                                      bool& contended);
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
  LocalQueue queue_;
  Renewer renewer_;
};

struct ClientAccess {
  static ClientCore& core(Client& client) { return *client.core_; }
};

// {"host":"...","pid":123,"program":"..."} for this process.
std::string process_metadata();

}  // namespace fencelock::detail
