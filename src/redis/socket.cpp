#include "redis/socket.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "core/errno_text.h"
#include "core/thread_name.h"

namespace fencelock::detail::redis {

namespace {

Result<AddressesPtr> resolve_now(const Endpoint& endpoint, int flags) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(endpoint.port);
  if (int rc = ::getaddrinfo(endpoint.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return Status(Code::kUnavailable, fmt::format("cannot connect to Redis at {}: {}",
                                                  endpoint_text(endpoint), ::gai_strerror(rc)));
  }
  return AddressesPtr(std::make_shared<const Addresses>(found));
}

}  // namespace

std::shared_ptr<Lookup> Lookup::start(const Endpoint& endpoint) {
  auto lookup = std::make_shared<Lookup>();
  lookup->address_ = endpoint_text(endpoint);
  // A numeric address needs no name server.
  if (auto numeric = resolve_now(endpoint, AI_NUMERICHOST); numeric.ok()) {
    lookup->result_ = std::move(numeric);
    return lookup;
  }
  try {
    std::thread([lookup, endpoint] {
      name_this_thread("fl-resolve");
      auto resolved = resolve_now(endpoint, 0);
      std::lock_guard<std::mutex> lock(lookup->mu_);
      lookup->result_ = std::move(resolved);
      lookup->finished_.notify_all();
    }).detach();
  } catch (const std::system_error& e) {
    lookup->result_ =
        Status(Code::kUnavailable, fmt::format("cannot resolve {}: no thread for the lookup ({})",
                                               lookup->address_, e.what()));
  }
  return lookup;
}

Result<AddressesPtr> Lookup::wait(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!finished_.wait_until(lock, deadline, [&] { return result_.has_value(); })) {
    return Status(Code::kDeadlineExceeded,
                  fmt::format("Redis at {}: the name lookup did not finish in time (is the name "
                              "server answering?)",
                              address_));
  }
  return *result_;
}

bool Lookup::done() {
  std::lock_guard<std::mutex> lock(mu_);
  return result_.has_value();
}

Result<ConnectionPtr> Connection::start(AddressesPtr addresses, std::string address) {
  ConnectionPtr c(new Connection());
  c->address_ = std::move(address);
  c->next_ = addresses->first();
  c->addresses_ = std::move(addresses);
  if (Status st = c->connect_next(); !st.ok()) return st;
  return c;
}

Connection::~Connection() {
  if (fd_ >= 0) ::close(fd_);
}

Status Connection::connect_next() {
  while (next_ != nullptr) {
    const addrinfo* a = next_;
    next_ = next_->ai_next;
    if (fd_ >= 0) ::close(fd_);
    fd_ = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd_ < 0) {
      last_error_ = errno_text(errno);
      continue;
    }
    const int one = 1;
    (void)::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::connect(fd_, a->ai_addr, a->ai_addrlen) == 0) {
      connecting_ = false;
      return Status::Ok();
    }
    if (errno == EINPROGRESS) {
      connecting_ = true;
      return Status::Ok();
    }
    last_error_ = errno_text(errno);
  }
  return Status(Code::kUnavailable,
                fmt::format("cannot connect to Redis at {}: {}", address_, last_error_));
}

void Connection::queue(std::string_view command) {
  if (written_ == out_.size()) {  // all written: start the buffer over
    out_.clear();
    written_ = 0;
  }
  out_.append(command);
}

Status Connection::on_writable() {
  if (connecting_) {
    int error = 0;
    socklen_t size = sizeof error;
    if (::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &error, &size) != 0) error = errno;
    if (error == EINPROGRESS || error == EALREADY) return Status::Ok();
    if (error != 0) {
      last_error_ = errno_text(error);
      return connect_next();  // the next address, if any
    }
    connecting_ = false;
  }
  while (written_ < out_.size()) {
    const ssize_t n = ::send(fd_, out_.data() + written_, out_.size() - written_, MSG_NOSIGNAL);
    if (n > 0) {
      written_ += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    return Status(Code::kUnavailable, fmt::format("lost connection to Redis at {}: {}", address_,
                                                  errno_text(n < 0 ? errno : EPIPE)));
  }
  if (written_ == out_.size()) {
    out_.clear();
    written_ = 0;
  }
  return Status::Ok();
}

Status Connection::on_readable() {
  if (connecting_) return on_writable();  // an error or hang-up while connecting
  // At most 1 MiB per call, so that one busy connection cannot starve the others of a loop.
  char buffer[64 * 1024];
  for (int round = 0; round < 16; ++round) {
    const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
    if (n > 0) {
      if (Status st = reader_.feed(std::string_view(buffer, static_cast<std::size_t>(n)));
          !st.ok()) {
        return Status(Code::kUnavailable, fmt::format("Redis at {}: {}", address_, st.message()));
      }
      if (static_cast<std::size_t>(n) < sizeof buffer) break;
      continue;
    }
    if (n == 0) {
      return Status(Code::kUnavailable,
                    fmt::format("lost connection to Redis at {}: the server closed it", address_));
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    return Status(Code::kUnavailable,
                  fmt::format("lost connection to Redis at {}: {}", address_, errno_text(errno)));
  }
  return Status::Ok();
}

Result<Reply> Connection::next_reply() {
  auto reply = reader_.next();
  if (reply.ok()) return reply;
  return Status(reply.status().code(),
                fmt::format("Redis at {}: {}", address_, reply.status().message()));
}

void Connection::abort() {
  if (fd_ < 0) return;
  const linger reset{1, 0};
  (void)::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
}

}  // namespace fencelock::detail::redis
