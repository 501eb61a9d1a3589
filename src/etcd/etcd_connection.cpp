#include "etcd/etcd_connection.h"

#include <thread>

#include <fmt/format.h>

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

}  // namespace

Status to_status(const grpc::Status& status, std::string_view what) {
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
      return Status(Code::kUnauthenticated, message);
    case grpc::StatusCode::PERMISSION_DENIED:
      return Status(Code::kPermissionDenied, message);
    case grpc::StatusCode::INVALID_ARGUMENT:
      if (status.error_message().find("authentication failed") != std::string::npos) {
        return Status(Code::kUnauthenticated, message);
      }
      return Status(Code::kInvalidArgument, message);
    default:
      return Status(Code::kInternal, message);
  }
}

EtcdConnection::EtcdConnection(std::vector<std::string> endpoints, std::string user,
                               std::string password,
                               std::shared_ptr<grpc::ChannelCredentials> credentials,
                               ClientOptions options)
    : options_(options), user_(std::move(user)), password_(std::move(password)) {
  for (auto& endpoint : endpoints) {
    grpc::ChannelArguments arguments;
    arguments.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);  // loopback must not go through a proxy
    arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    arguments.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    Stubs stubs;
    stubs.endpoint = endpoint;
    stubs.channel =
        grpc::CreateCustomChannel(endpoint, credentials, arguments);
    stubs.kv = pb::KV::NewStub(stubs.channel);
    stubs.watch = pb::Watch::NewStub(stubs.channel);
    stubs.lease = pb::Lease::NewStub(stubs.channel);
    stubs.auth = pb::Auth::NewStub(stubs.channel);
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
    std::lock_guard lock(token_mu_);
    token_ = response.token();
  }
  return status;
}

void EtcdConnection::prepare(grpc::ClientContext& context, Clock::time_point deadline) {
  context.set_deadline(to_system(deadline));
  context.AddMetadata("hasleader", "true");
  std::lock_guard lock(token_mu_);
  if (!token_.empty()) context.AddMetadata("token", token_);
}

grpc::Status EtcdConnection::call(Clock::time_point deadline, const CallFn& fn) {
  grpc::Status status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline passed before the call");
  bool reauthenticated = false;
  std::size_t tried = 0;
  while (Clock::now() < deadline) {
    std::size_t index = current_.load() % members_.size();
    grpc::ClientContext context;
    prepare(context, std::min(deadline, Clock::now() + options_.io_timeout));
    status = fn(members_[index], context);
    if (status.ok()) return status;
    if (invalid_token(status) && !user_.empty() && !reauthenticated) {
      reauthenticated = true;
      grpc::Status auth = authenticate(deadline);
      if (!auth.ok()) return auth;
      continue;
    }
    if (!retryable(status)) return status;
    // Fail over: the next member, unless another thread already moved on.
    std::size_t expected = index;
    current_.compare_exchange_strong(expected, (index + 1) % members_.size());
    if (++tried % members_.size() == 0) {
      std::this_thread::sleep_for(
          std::min<Clock::duration>(milliseconds(50), deadline - Clock::now()));
    }
  }
  return status;
}

grpc::Status EtcdConnection::keep_alive(std::int64_t lease, Clock::time_point deadline,
                                        std::int64_t* ttl) {
  *ttl = 0;
  return call(deadline, [&](Stubs& stubs, grpc::ClientContext& context) {
    auto stream = stubs.lease->LeaseKeepAlive(&context);
    pb::LeaseKeepAliveRequest request;
    request.set_id(lease);
    pb::LeaseKeepAliveResponse response;
    if (!stream->Write(request) || !stream->Read(&response)) {
      context.TryCancel();
      grpc::Status status = stream->Finish();
      if (status.ok() || status.error_code() == grpc::StatusCode::CANCELLED) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            "keep-alive stream ended without a reply");
      }
      return status;
    }
    *ttl = response.ttl();
    stream->WritesDone();
    context.TryCancel();  // do not wait for the server to end the stream
    (void)stream->Finish();
    return grpc::Status::OK;
  });
}

EtcdConnection::WatchResult EtcdConnection::watch(
    const pb::WatchCreateRequest& create, Clock::time_point until, std::stop_token stop,
    const std::function<bool(const pb::WatchResponse&)>& event) {
  Stubs& stubs = members_[current_.load() % members_.size()];
  grpc::ClientContext context;
  prepare(context, until);
  std::stop_callback on_stop(stop, [&context] { context.TryCancel(); });
  auto stream = stubs.watch->Watch(&context);
  pb::WatchRequest request;
  *request.mutable_create_request() = create;
  WatchResult result = WatchResult::kFailed;
  if (stream->Write(request)) {
    pb::WatchResponse response;
    while (stream->Read(&response)) {
      // A cancelled watch (compacted start revision, lost leader) just means: look again.
      if (response.canceled()) break;
      if (event(response)) {
        result = WatchResult::kEvent;
        break;
      }
    }
  }
  context.TryCancel();
  grpc::Status status = stream->Finish();
  if (result == WatchResult::kEvent) return result;
  if (stop.stop_requested()) return WatchResult::kCancelled;
  if (Clock::now() >= until) return WatchResult::kTimedOut;
  if (retryable(status)) {
    std::size_t expected = current_.load();
    current_.compare_exchange_strong(expected, (expected + 1) % members_.size());
  }
  return WatchResult::kFailed;
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
