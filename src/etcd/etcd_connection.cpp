#include "etcd/etcd_connection.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include "core/mutex.h"
#include "core/thread_name.h"

namespace fencelock::detail::etcd {
namespace {

std::chrono::system_clock::time_point to_system(Clock::time_point deadline) {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(deadline - Clock::now());
}

bool retryable(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE ||
         status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

bool invalid_token(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAUTHENTICATED &&
         status.error_message().find("token") != std::string::npos;
}

void add_metadata(grpc::ClientContext& context, const std::string& token) {
  context.AddMetadata("hasleader", "true");
  if (!token.empty()) context.AddMetadata("token", token);
}

// One long-lived bidirectional stream to one member. Its reader thread opens it (connecting may
// block), reads until it ends, and hands each response to on_response(); callers write requests
// (serialized by write_mu_) and wait on cv_ for what the reader hands them. Lock order: write_mu_
// before mu_; the reader never holds mu_ while it writes.
template <class Request, class Response>
class SharedStream {
 public:
  using Rpc = grpc::ClientReaderWriter<Request, Response>;
  using Open = std::function<std::unique_ptr<Rpc>(grpc::ClientContext*)>;

  SharedStream(std::size_t member, std::string token) : member_(member), token_(std::move(token)) {}
  SharedStream(const SharedStream&) = delete;
  SharedStream& operator=(const SharedStream&) = delete;
  // REQUIRES: close() ran, or start() never did.
  virtual ~SharedStream() = default;

  // For metadata, before start(). The context has no deadline: the stream lives until it fails.
  grpc::ClientContext& context() { return context_; }

  // Starts the reader thread. `on_failure` runs on it when the stream ends by a failure of the
  // member (not by close()), to move the connection on to the next member.
  void start(Open open, std::function<void()> on_failure) {
    reader_ = std::thread([this, open = std::move(open), on_failure = std::move(on_failure)] {
      name_this_thread("fl-etcd-stream");
      read_until_end(open, on_failure);
    });
  }

  // True while the stream has not ended and was opened on `member` with `token`.
  bool serves(std::size_t member, const std::string& token) {
    MutexLock lock(mu_);
    return state_ != State::kEnded && !cancelled_ && member == member_ && token == token_;
  }

  // Ends the stream without failover (shutdown, or a replacement) and joins the reader. Pending
  // callers see the stream end.
  void close() {
    cancel(/*failed=*/false);
    if (reader_.joinable()) reader_.join();
  }

 protected:
  enum class State { kOpening, kOpen, kEnded };

  // Ends the stream as a failure of its member (it left a caller unanswered), failing over.
  void break_off() { cancel(/*failed=*/true); }

  // Waits (mu_ held by `lock`) until the reader opened or ended the stream, `deadline` passed or
  // `stop` fired. True when open.
  bool wait_open(MutexLock& lock, Clock::time_point deadline, std::stop_token stop)
      FENCELOCK_REQUIRES(mu_) {
    cv_.wait_until(lock, stop, deadline,
                   [this]() FENCELOCK_REQUIRES(mu_) { return state_ != State::kOpening; });
    return state_ == State::kOpen;
  }

  // Runs `enqueue` under mu_ (so that pending entries are in the order written) and writes
  // `request`. False, without enqueueing, when the stream is not writable. A failed Write needs
  // no answer here: the stream then ends, and the reader fails what is pending.
  bool write(const Request& request, const std::function<void()>& enqueue) {
    MutexLock write_lock(write_mu_);
    if (!writable_) return false;
    {
      MutexLock lock(mu_);
      if (state_ != State::kOpen) return false;
      if (enqueue) enqueue();
    }
    (void)rpc_->Write(request);
    return true;
  }

  // On the reader thread, no lock held.
  virtual void on_response(Response& response) = 0;
  // With mu_ held, once the stream ended (state_ is kEnded, end_ set): fail every pending caller.
  virtual void fail_pending() FENCELOCK_REQUIRES(mu_) = 0;

  Mutex mu_;
  std::condition_variable_any cv_;  // notified when state_ or a pending entry changes
  State state_ FENCELOCK_GUARDED_BY(mu_) = State::kOpening;
  grpc::Status end_ FENCELOCK_GUARDED_BY(mu_);  // why the stream ended

 private:
  void cancel(bool failed) {
    {
      MutexLock lock(mu_);
      cancelled_ = true;
      broken_off_ = broken_off_ || failed;
    }
    context_.TryCancel();
  }

  void read_until_end(const Open& open, const std::function<void()>& on_failure) {
    std::unique_ptr<Rpc> rpc = open(&context_);
    {
      MutexLock write_lock(write_mu_);
      rpc_ = std::move(rpc);
      writable_ = true;
    }
    {
      MutexLock lock(mu_);
      if (cancelled_) context_.TryCancel();  // cancel() may have come before the call existed
      state_ = State::kOpen;
    }
    cv_.notify_all();
    Response response;
    while (rpc_->Read(&response)) on_response(response);
    {
      MutexLock write_lock(write_mu_);
      writable_ = false;  // no Write from here on: Finish follows
    }
    grpc::Status status = rpc_->Finish();
    bool failed = false;
    {
      MutexLock lock(mu_);
      state_ = State::kEnded;
      if (status.ok() || status.error_code() == grpc::StatusCode::CANCELLED) {
        end_ = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            fmt::format("stream ended: {}", status.error_message()));
      } else {
        end_ = status;
      }
      failed = broken_off_ || (!cancelled_ && retryable(status));
      fail_pending();
    }
    cv_.notify_all();
    if (failed) on_failure();
  }

  const std::size_t member_;
  const std::string token_;
  grpc::ClientContext context_;
  std::thread reader_;
  bool cancelled_ FENCELOCK_GUARDED_BY(mu_) = false;
  bool broken_off_ FENCELOCK_GUARDED_BY(mu_) = false;
  Mutex write_mu_;
  bool writable_ FENCELOCK_GUARDED_BY(write_mu_) = false;
  std::unique_ptr<Rpc> rpc_;  // set under write_mu_ before writable_; read by the reader
};

struct PendingKeepAlive {
  std::int64_t lease = 0;
  bool answered = false;
  std::int64_t ttl = 0;
};

struct Watcher {
  std::deque<pb::WatchResponse> responses;  // for the caller to look at, in order
  std::int64_t id = 0;                      // etcd's watch_id, once created
  bool created = false;
  bool ended = false;      // etcd canceled the watch, or the stream ended
  bool abandoned = false;  // the caller left before "created": cancel the watch when it comes
};

EtcdConnection::WatchResult outcome(bool fired, Clock::time_point until,
                                    const std::stop_token& stop) {
  using WatchResult = EtcdConnection::WatchResult;
  if (fired) return WatchResult::kEvent;
  if (stop.stop_requested()) return WatchResult::kCancelled;
  if (Clock::now() >= until) return WatchResult::kTimedOut;
  return WatchResult::kFailed;
}

}  // namespace

Status to_status(const grpc::Status& status, std::string_view what) {
  // Said once, here: the CLI adds no advice of its own to a credentials error.
  constexpr const char* kCredentialAdvice =
      "; check the user and password in the URI or FENCELOCK_ETCD_PASSWORD";
  std::string message = fmt::format("etcd {}: {}", what, status.error_message());
  switch (status.error_code()) {
    case grpc::StatusCode::OK:
      return Status::Ok();
    case grpc::StatusCode::UNAVAILABLE:
      return Status(Code::kUnavailable, message);
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return Status(Code::kDeadlineExceeded, message);
    case grpc::StatusCode::CANCELLED:
      return Status(Code::kCancelled, message);
    case grpc::StatusCode::UNAUTHENTICATED:
      return Status(Code::kUnauthenticated, message + kCredentialAdvice);
    case grpc::StatusCode::PERMISSION_DENIED:
      return Status(Code::kPermissionDenied, message);
    case grpc::StatusCode::FAILED_PRECONDITION:
      if (status.error_message().find("authentication is not enabled") != std::string::npos) {
        return Status(Code::kInvalidArgument,
                      message +
                          "; the cluster does not use authentication, but a user and password "
                          "were given (in the URI or FENCELOCK_ETCD_USER / "
                          "FENCELOCK_ETCD_PASSWORD): remove them, or enable authentication "
                          "(etcdctl auth enable)");
      }
      return Status(Code::kInternal, message);
    case grpc::StatusCode::INVALID_ARGUMENT:
      if (status.error_message().find("authentication failed") != std::string::npos) {
        return Status(Code::kUnauthenticated, message + kCredentialAdvice);
      }
      return Status(Code::kInvalidArgument, message);
    default:
      return Status(Code::kInternal, message);
  }
}

EtcdConnection::EtcdConnection(const std::vector<std::string>& endpoints, std::string user,
                               std::string password,
                               const std::shared_ptr<grpc::ChannelCredentials>& credentials,
                               ClientOptions options)
    : options_(options), user_(std::move(user)), password_(std::move(password)) {
  for (auto& endpoint : endpoints) {
    grpc::ChannelArguments arguments;
    arguments.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);  // loopback must not go through a proxy
    // round_robin over the one address, not the default pick_first: gRPC 1.51's pick_first
    // leaves a subchannel IDLE once its reconnect backoff has run out after "connection reset"
    // (traced with `fencelock torture --faults drop`); round_robin asks it to connect again.
    arguments.SetLoadBalancingPolicyName("round_robin");
    arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    // gRPC 1.51 also takes this as the connect timeout: 100 ms is too short for a handshake on
    // a loaded machine, and the default (20 s) leaves a connection attempt that went nowhere
    // (a member that restarted, a reset during the handshake) hanging that long.
    arguments.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 1000);
    arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    Stubs stubs;
    stubs.endpoint = endpoint;
    stubs.channel = grpc::CreateCustomChannel(endpoint, credentials, arguments);
    stubs.kv = pb::KV::NewStub(stubs.channel);
    stubs.watch = pb::Watch::NewStub(stubs.channel);
    stubs.lease = pb::Lease::NewStub(stubs.channel);
    stubs.auth = pb::Auth::NewStub(stubs.channel);
    stubs.maintenance = pb::Maintenance::NewStub(stubs.channel);
    members_.push_back(std::move(stubs));
  }
}

Status EtcdConnection::connect() {
  // Every member connects in parallel (GetState starts it); waiting on each in short turns
  // drives gRPC's polling. The first one ready becomes the current member, so one dead member
  // never uses up the whole connect_timeout.
  const Clock::time_point deadline = Clock::now() + options_.connect_timeout;
  for (auto& member : members_) (void)member.channel->GetState(/*try_to_connect=*/true);
  bool connected = false;
  while (!connected) {
    for (std::size_t i = 0; i < members_.size() && !connected; ++i) {
      if (members_[i].channel->WaitForConnected(
              to_system(std::min(deadline, Clock::now() + milliseconds(20))))) {
        current_ = i;
        connected = true;
      }
    }
    if (Clock::now() >= deadline) break;
  }
  if (!connected) {
    return Status(Code::kUnavailable, fmt::format("no etcd member answered within {} ms",
                                                  options_.connect_timeout.count()));
  }
  if (user_.empty()) return Status::Ok();
  return to_status(authenticate(Clock::now() + options_.connect_timeout + options_.io_timeout),
                   "authentication");
}

grpc::Status EtcdConnection::authenticate(Clock::time_point deadline) {
  pb::AuthenticateRequest request;
  request.set_name(user_);
  request.set_password(password_);
  pb::AuthenticateResponse response;
  grpc::Status status;
  for (std::size_t tried = 0; tried < 2 * members_.size() && Clock::now() < deadline; ++tried) {
    Stubs& stubs = members_[current_.load() % members_.size()];
    grpc::ClientContext context;
    context.set_deadline(to_system(std::min(deadline, Clock::now() + options_.io_timeout)));
    status = stubs.auth->Authenticate(&context, request, &response);
    if (!retryable(status)) break;
    current_ = (current_.load() + 1) % members_.size();
  }
  if (status.ok()) {
    MutexLock lock(token_mu_);
    token_ = response.token();
  }
  return status;
}

void EtcdConnection::prepare(grpc::ClientContext& context, Clock::time_point deadline) {
  context.set_deadline(to_system(deadline));
  add_metadata(context, current_token());
}

grpc::Status EtcdConnection::with_failover(Clock::time_point deadline, std::string_view what,
                                           const std::function<grpc::Status(bool* stop)>& attempt) {
  grpc::Status status(grpc::StatusCode::DEADLINE_EXCEEDED,
                      fmt::format("deadline passed before the {}", what));
  bool reauthenticated = false;
  for (std::size_t tried = 0; Clock::now() < deadline;) {
    bool stop = false;
    status = attempt(&stop);
    if (stop) return status;
    if (status.ok()) {
      reconnects_.connected();
      return status;
    }
    if (invalid_token(status) && !user_.empty() && !reauthenticated) {
      reauthenticated = true;
      grpc::Status auth = authenticate(deadline);
      if (!auth.ok()) return auth;
      continue;  // with the new token (a stream is replaced for it)
    }
    if (!retryable(status)) return status;
    reconnects_.failed();
    if (++tried % members_.size() == 0) pause_between_rounds(deadline);
  }
  return status;
}

grpc::Status EtcdConnection::call(Clock::time_point deadline, const CallFn& fn) {
  return with_failover(deadline, "call", [&](bool*) {
    const std::size_t index = current_.load() % members_.size();
    grpc::ClientContext context;
    prepare(context, std::min(deadline, Clock::now() + options_.io_timeout));
    grpc::Status status = fn(members_[index], context);
    if (!status.ok() && retryable(status)) fail_over(index);
    return status;
  });
}

// The shared LeaseKeepAlive stream. etcd answers the requests of one stream in order, each
// with the lease ID it asked about (TTL 0 when the lease is gone).
class EtcdConnection::LeaseStream final
    : public SharedStream<pb::LeaseKeepAliveRequest, pb::LeaseKeepAliveResponse> {
 public:
  using SharedStream::SharedStream;
  ~LeaseStream() override = default;

  grpc::Status keep_alive(std::int64_t lease, Clock::time_point deadline, std::int64_t* ttl) {
    auto pending = std::make_shared<PendingKeepAlive>();
    pending->lease = lease;
    pb::LeaseKeepAliveRequest request;
    request.set_id(lease);
    MutexLock lock(mu_);
    if (wait_open(lock, deadline, {})) {
      lock.unlock();
      if (!write(request, [&]() FENCELOCK_REQUIRES(mu_) { pending_.push_back(pending); })) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "etcd keep-alive stream ended");
      }
      lock.lock();
      cv_.wait_until(lock, deadline, [&]() FENCELOCK_REQUIRES(mu_) {
        return pending->answered || state_ == State::kEnded;
      });
    }
    if (pending->answered) {
      *ttl = pending->ttl;
      return grpc::Status::OK;
    }
    if (state_ == State::kEnded) return end_;
    lock.unlock();
    // Unanswered in time: this member is stuck. Ending the stream drops every pending entry.
    break_off();
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "no keep-alive reply in time");
  }

 private:
  void on_response(pb::LeaseKeepAliveResponse& response) override {
    {
      MutexLock lock(mu_);
      // The oldest request for this lease: replies come in request order.
      auto it = std::find_if(pending_.begin(), pending_.end(),
                             [&](const auto& pending) { return pending->lease == response.id(); });
      if (it == pending_.end()) return;
      (*it)->answered = true;
      (*it)->ttl = response.ttl();
      pending_.erase(it);
    }
    cv_.notify_all();
  }

  void fail_pending() override FENCELOCK_REQUIRES(mu_) { pending_.clear(); }

  std::deque<std::shared_ptr<PendingKeepAlive>> pending_
      FENCELOCK_GUARDED_BY(mu_);  // in write order
};

// The shared Watch stream. etcd answers the creates of one stream in order, each with a "created"
// response carrying the new watch_id (canceled too when etcd refused it); later responses carry
// the watch_id they belong to.
class EtcdConnection::WatchStream final : public SharedStream<pb::WatchRequest, pb::WatchResponse> {
 public:
  using SharedStream::SharedStream;
  ~WatchStream() override = default;

  WatchResult watch(const pb::WatchCreateRequest& create, Clock::time_point until,
                    std::stop_token stop,
                    const std::function<bool(const pb::WatchResponse&)>& event) {
    auto watcher = std::make_shared<Watcher>();
    pb::WatchRequest request;
    *request.mutable_create_request() = create;
    request.mutable_create_request()->set_watch_id(0);  // etcd numbers the watches of a stream
    {
      MutexLock lock(mu_);
      if (!wait_open(lock, until, stop)) return outcome(false, until, stop);
    }
    if (!write(request, [&]() FENCELOCK_REQUIRES(mu_) { creating_.push_back(watcher); })) {
      return outcome(false, until, stop);
    }
    bool fired = false;
    MutexLock lock(mu_);
    while (!fired && Clock::now() < until) {
      cv_.wait_until(lock, stop, until,
                     [&] { return !watcher->responses.empty() || watcher->ended; });
      if (watcher->responses.empty()) break;  // ended, stopped or timed out
      pb::WatchResponse response = std::move(watcher->responses.front());
      watcher->responses.pop_front();
      lock.unlock();
      fired = event(response);
      lock.lock();
    }
    std::optional<std::int64_t> cancel;
    if (!watcher->ended) {
      if (watcher->created) {
        watching_.erase(watcher->id);
        cancel = watcher->id;
      } else {
        watcher->abandoned = true;
      }
    }
    lock.unlock();
    if (cancel) cancel_watch(*cancel);
    return outcome(fired, until, stop);
  }

 private:
  void on_response(pb::WatchResponse& response) override {
    std::optional<std::int64_t> orphan;
    {
      MutexLock lock(mu_);
      if (response.created()) {
        if (creating_.empty()) return;  // not a create of ours: nothing to match
        std::shared_ptr<Watcher> watcher = std::move(creating_.front());
        creating_.pop_front();
        if (response.canceled()) {
          watcher->ended = true;
        } else if (watcher->abandoned) {
          orphan = response.watch_id();
        } else {
          watcher->created = true;
          watcher->id = response.watch_id();
          watching_[watcher->id] = watcher;
          if (response.events_size() > 0) watcher->responses.push_back(std::move(response));
        }
      } else {
        auto it = watching_.find(response.watch_id());
        if (it == watching_.end()) return;  // a watch already canceled, or unknown
        if (response.canceled()) {
          it->second->ended = true;  // compacted revision, lost leader: look again
          watching_.erase(it);
        } else {
          it->second->responses.push_back(std::move(response));
        }
      }
    }
    cv_.notify_all();
    if (orphan) cancel_watch(*orphan);
  }

  void fail_pending() override FENCELOCK_REQUIRES(mu_) {
    for (auto& watcher : creating_) watcher->ended = true;
    for (auto& [_, watcher] : watching_) watcher->ended = true;
    creating_.clear();
    watching_.clear();
  }

  void cancel_watch(std::int64_t id) {
    pb::WatchRequest request;
    request.mutable_cancel_request()->set_watch_id(id);
    (void)write(request, nullptr);
  }

  // Callers whose create was written and is not yet answered, in write order.
  std::deque<std::shared_ptr<Watcher>> creating_ FENCELOCK_GUARDED_BY(mu_);
  std::map<std::int64_t, std::shared_ptr<Watcher>> watching_
      FENCELOCK_GUARDED_BY(mu_);  // by watch_id
};

EtcdConnection::~EtcdConnection() {
  MutexLock lock(streams_mu_);
  closing_ = true;
  if (lease_stream_) lease_stream_->close();
  if (watch_stream_) watch_stream_->close();
}

std::string EtcdConnection::current_token() {
  MutexLock lock(token_mu_);
  return token_;
}

void EtcdConnection::pause_between_rounds(Clock::time_point deadline) {
  // Not a plain sleep: a synchronous gRPC client only makes progress on connection attempts
  // while some thread polls, and calls on a channel in TRANSIENT_FAILURE fail without polling.
  // Waiting for the member to connect drives its reconnection (without this, a channel whose
  // connections were reset stayed down for good: `fencelock torture --faults drop`).
  const Clock::time_point until = std::min(deadline, Clock::now() + milliseconds(50));
  (void)members_[current_.load() % members_.size()].channel->WaitForConnected(to_system(until));
  if (Clock::now() < until) std::this_thread::sleep_until(until);
}

void EtcdConnection::fail_over(std::size_t from) {
  std::size_t expected = from;
  current_.compare_exchange_strong(expected, (from + 1) % members_.size());
}

template <class Stream, class Open>
std::shared_ptr<Stream> EtcdConnection::shared_stream(
    std::shared_ptr<Stream> EtcdConnection::*slot_member, Open open) {
  const std::size_t member = current_.load() % members_.size();
  const std::string token = current_token();
  MutexLock lock(streams_mu_);
  if (closing_) return nullptr;
  // The stream slot (lease_stream_ or watch_stream_), named by member so that it is only
  // touched here, under streams_mu_.
  std::shared_ptr<Stream>& slot = this->*slot_member;
  if (slot && slot->serves(member, token)) return slot;
  if (slot) slot->close();  // its waiting callers fail and look again
  slot = std::make_shared<Stream>(member, token);
  add_metadata(slot->context(), token);
  Stubs& stubs = members_[member];
  slot->start([&stubs, open](grpc::ClientContext* context) { return open(stubs, context); },
              [this, member] { fail_over(member); });
  return slot;
}

grpc::Status EtcdConnection::keep_alive(std::int64_t lease, Clock::time_point deadline,
                                        std::int64_t* ttl) {
  *ttl = 0;
  return with_failover(deadline, "keep-alive", [&](bool* stop) {
    auto stream = shared_stream(&EtcdConnection::lease_stream_,
                                [](Stubs& stubs, grpc::ClientContext* context) {
                                  return stubs.lease->LeaseKeepAlive(context);
                                });
    if (!stream) {
      *stop = true;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "etcd connection closed");
    }
    // A failed stream fails over by itself (shared_stream's callback).
    return stream->keep_alive(lease, deadline, ttl);
  });
}

EtcdConnection::WatchResult EtcdConnection::watch(
    const pb::WatchCreateRequest& create, Clock::time_point until, std::stop_token stop,
    const std::function<bool(const pb::WatchResponse&)>& event) {
  auto stream = shared_stream(
      &EtcdConnection::watch_stream_,
      [](Stubs& stubs, grpc::ClientContext* context) { return stubs.watch->Watch(context); });
  if (!stream) return WatchResult::kFailed;
  return stream->watch(create, until, stop, event);
}

EtcdConnection::WatchResult EtcdConnection::wait_for_delete(const std::string& key,
                                                            std::int64_t start_revision,
                                                            Clock::time_point until,
                                                            std::stop_token stop) {
  pb::WatchCreateRequest create;
  create.set_key(key);
  create.set_start_revision(start_revision);
  create.add_filters(pb::WatchCreateRequest::NOPUT);
  return watch(create, until, stop, [](const pb::WatchResponse& response) {
    for (const auto& event : response.events()) {
      if (event.type() == pb::Event::DELETE) return true;
    }
    return false;
  });
}

}  // namespace fencelock::detail::etcd
