// EtcdConnection: gRPC channels to the members of one etcd cluster, with failover and auth.
//
// One channel per endpoint (insecure, or TLS for etcds://) (HTTP proxy disabled, fast reconnect).
// Every call carries a per-call deadline (ClientOptions::io_timeout, cut to the caller's deadline)
// and the metadata `hasleader=true`, so that a member cut off from its leader refuses at once
// instead of hanging. A call that ends UNAVAILABLE or DEADLINE_EXCEEDED is retried on the next
// endpoint while the caller's deadline allows (every call fencelock makes is idempotent, except
// LeaseGrant, whose duplicate lease merely expires). With user:password, Authenticate's token
// travels in the metadata `token`; an invalid-token reply re-authenticates once and retries.
//
// Concurrency mechanism: unary calls are blocking gRPC calls on the caller's thread. Keep-alives
// and watches share two long-lived streams per connection, one LeaseKeepAlive and one Watch
// (blocking ClientReaderWriter, no deadline, the same metadata as calls), each opened lazily on
// the current member by its own reader thread, which hands replies to the waiting callers.
// Writes are serialized by a per-stream mutex. keep_alive() writes the lease ID and waits for
// the oldest reply carrying it (replies come in request order). watch() sends a
// WatchCreateRequest; etcd numbers watches in creation order on a stream, so "created" replies are
// matched to callers in the order their creates were written; the caller then receives the
// responses for its watch_id and sends a WatchCancelRequest when done. Every wait is bounded by
// the caller's deadline (and stop token). When a stream ends (member down, no leader, or a
// keep-alive unanswered by its deadline, which cancels the stream), its pending callers fail
// (UNAVAILABLE / kFailed), the current member moves to the next one, and the next call opens a
// fresh stream there; a stream is also replaced when the current member or the auth token changed.
// The destructor cancels both streams and joins their readers.
//
// Thread-safety: all methods may be called from several threads at once.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "core/backend.h"
#include "core/mutex.h"
#include "core/reconnects.h"
#include "etcd/fencelock_etcd.grpc.pb.h"
#include "fencelock/options.h"

namespace fencelock::detail::etcd {

namespace pb = fencelock::etcdserverpb;

struct Stubs {
  std::string endpoint;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::KV::Stub> kv;
  std::unique_ptr<pb::Watch::Stub> watch;
  std::unique_ptr<pb::Lease::Stub> lease;
  std::unique_ptr<pb::Auth::Stub> auth;
  std::unique_ptr<pb::Maintenance::Stub> maintenance;
};

// A gRPC status as a fencelock Status; `what` names the call (never credentials).
Status to_status(const grpc::Status& status, std::string_view what);

class EtcdConnection {
 public:
  // `credentials`: grpc::InsecureChannelCredentials() for etcd://, SslCredentials for etcds://.
  EtcdConnection(const std::vector<std::string>& endpoints, std::string user, std::string password,
                 const std::shared_ptr<grpc::ChannelCredentials>& credentials,
                 ClientOptions options);
  EtcdConnection(const EtcdConnection&) = delete;
  EtcdConnection& operator=(const EtcdConnection&) = delete;
  // Cancels the shared streams and joins their reader threads; waiting watches return kFailed,
  // waiting keep-alives UNAVAILABLE. Never throws.
  ~EtcdConnection();

  // Waits (connect_timeout) until some member accepts a connection, and authenticates when
  // credentials were given. kUnavailable / kUnauthenticated.
  Status connect();

  using CallFn = std::function<grpc::Status(Stubs&, grpc::ClientContext&)>;
  // Runs `fn` with a prepared context, failing over between members until it succeeds, fails
  // for a reason other than availability, or `deadline` passes. Returns the last gRPC status.
  grpc::Status call(Clock::time_point deadline, const CallFn& fn);

  // One keep-alive of `lease` on the shared LeaseKeepAlive stream, retried on the next member
  // while `deadline` allows: the TTL etcd answered (0: lease gone). DEADLINE_EXCEEDED when no
  // reply came in time.
  grpc::Status keep_alive(std::int64_t lease, Clock::time_point deadline, std::int64_t* ttl);

  enum class WatchResult { kEvent, kTimedOut, kCancelled, kFailed };
  // Runs one watch made by `create` (its watch_id is ignored: etcd numbers watches) on the shared
  // Watch stream until `event` returns true for a response (kEvent), `until` passes, or `stop`
  // fires. `event` runs on the caller's thread. kFailed when the stream ends or etcd cancels the
  // watch (compacted revision, lost leader): look again, on the next member.
  WatchResult watch(const pb::WatchCreateRequest& create, Clock::time_point until,
                    std::stop_token stop,
                    const std::function<bool(const pb::WatchResponse&)>& event);
  // Watches `key` from `start_revision` for its deletion (kEvent), until `until` or `stop`.
  WatchResult wait_for_delete(const std::string& key, std::int64_t start_revision,
                              Clock::time_point until, std::stop_token stop);

  const ClientOptions& options() const { return options_; }
  // Calls and keep-alives that succeeded after a connection-level failure (a failover, or a
  // member that came back): ReconnectCounter.
  std::uint64_t reconnects() const { return reconnects_.count(); }

 private:
  class LeaseStream;
  class WatchStream;

  void prepare(grpc::ClientContext& context, Clock::time_point deadline);
  grpc::Status authenticate(Clock::time_point deadline);
  std::string current_token();
  // Between two rounds over every member: waits up to 50 ms (never past `deadline`) for the
  // current member to connect, which also drives gRPC's reconnection.
  void pause_between_rounds(Clock::time_point deadline);
  // Moves the current member past `from`, unless another thread already moved it.
  void fail_over(std::size_t from);
  // The one retry policy of calls and keep-alives: `attempt` until it succeeds, a failure that
  // no retry can mend, or `deadline`; an invalid token re-authenticates once; after every
  // round over the members, pause_between_rounds. `attempt` fails over itself (or leaves it to
  // its stream) and sets *stop to end at once with what it returned. `what` names the call in
  // the status of a deadline that passed before the first attempt.
  grpc::Status with_failover(Clock::time_point deadline, std::string_view what,
                             const std::function<grpc::Status(bool* stop)>& attempt);
  // The shared stream in `slot`, replaced by a fresh one (opened with `open`) when it ended, was
  // opened on another member than the current one, or with another token. nullptr once the
  // destructor runs.
  template <class Stream, class Open>
  std::shared_ptr<Stream> shared_stream(std::shared_ptr<Stream> EtcdConnection::*slot_member,
                                        Open open);

  const ClientOptions options_;
  const std::string user_;
  const std::string password_;
  std::vector<Stubs> members_;
  std::atomic<std::size_t> current_{0};
  ReconnectCounter reconnects_;
  Mutex token_mu_;
  std::string token_ FENCELOCK_GUARDED_BY(token_mu_);
  Mutex streams_mu_;  // held while a stream is replaced or closed
  bool closing_ FENCELOCK_GUARDED_BY(streams_mu_) = false;
  std::shared_ptr<LeaseStream> lease_stream_ FENCELOCK_GUARDED_BY(streams_mu_);
  std::shared_ptr<WatchStream> watch_stream_ FENCELOCK_GUARDED_BY(streams_mu_);
};

}  // namespace fencelock::detail::etcd
