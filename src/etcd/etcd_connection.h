// EtcdConnection: gRPC channels to the members of one etcd cluster, with failover and auth.
//
// One channel per endpoint (insecure, or TLS for etcds://) (HTTP proxy disabled, fast reconnect). Every call carries a
// per-call deadline (ClientOptions::io_timeout, cut to the caller's deadline) and the metadata
// `hasleader=true`, so that a member cut off from its leader refuses at once instead of hanging.
// A call that ends UNAVAILABLE or DEADLINE_EXCEEDED is retried on the next endpoint while the
// caller's deadline allows (every call fencelock makes is idempotent, except LeaseGrant, whose
// duplicate lease merely expires). With user:password, Authenticate's token travels in the
// metadata `token`; an invalid-token reply re-authenticates once and retries.
//
// Concurrency mechanism: blocking gRPC calls on the caller's thread (gRPC's own threads do the
// I/O); no thread of our own. Watches are one stream per waiting acquisition, ended by
// TryCancel (etcd 3.4 keeps a Watch stream open after WritesDone).
//
// Thread-safety: all methods may be called from several threads at once.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <vector>

#include "core/backend.h"
#include "etcd/etcd.grpc.pb.h"
#include "fencelock/options.h"

namespace fencelock::detail::etcd {

namespace pb = etcdserverpb;

struct Stubs {
  std::string endpoint;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::KV::Stub> kv;
  std::unique_ptr<pb::Watch::Stub> watch;
  std::unique_ptr<pb::Lease::Stub> lease;
  std::unique_ptr<pb::Auth::Stub> auth;
};

// A gRPC status as a fencelock Status; `what` names the call (never credentials).
Status to_status(const grpc::Status& status, std::string_view what);

class EtcdConnection {
 public:
  // `credentials`: grpc::InsecureChannelCredentials() for etcd://, SslCredentials for etcds://.
  EtcdConnection(std::vector<std::string> endpoints, std::string user, std::string password,
                 std::shared_ptr<grpc::ChannelCredentials> credentials, ClientOptions options);

  // Waits (connect_timeout) until some member accepts a connection, and authenticates when
  // credentials were given. kUnavailable / kUnauthenticated.
  Status connect();

  using CallFn = std::function<grpc::Status(Stubs&, grpc::ClientContext&)>;
  // Runs `fn` with a prepared context, failing over between members until it succeeds, fails
  // for a reason other than availability, or `deadline` passes. Returns the last gRPC status.
  grpc::Status call(Clock::time_point deadline, const CallFn& fn);

  // One LeaseKeepAlive round on a fresh short stream: the TTL etcd answered (0: lease gone).
  grpc::Status keep_alive(std::int64_t lease, Clock::time_point deadline, std::int64_t* ttl);

  enum class WatchResult { kEvent, kTimedOut, kCancelled, kFailed };
  // Runs one Watch stream made by `create` on the current member until `event` returns true for
  // a response (kEvent), `until` passes, or `stop` fires. kFailed when the stream ends or etcd
  // cancels the watch (compacted revision, lost leader): look again, on the next member.
  WatchResult watch(const pb::WatchCreateRequest& create, Clock::time_point until,
                    std::stop_token stop,
                    const std::function<bool(const pb::WatchResponse&)>& event);
  // Watches `key` from `start_revision` for its deletion (kEvent), until `until` or `stop`.
  WatchResult wait_for_delete(const std::string& key, std::int64_t start_revision,
                              Clock::time_point until, std::stop_token stop);

  const ClientOptions& options() const { return options_; }

 private:
  void prepare(grpc::ClientContext& context, Clock::time_point deadline);
  grpc::Status authenticate(Clock::time_point deadline);

  const ClientOptions options_;
  const std::string user_;
  const std::string password_;
  std::vector<Stubs> members_;
  std::atomic<std::size_t> current_{0};
  std::mutex token_mu_;
  std::string token_;  // GUARDED_BY(token_mu_)
};

}  // namespace fencelock::detail::etcd
