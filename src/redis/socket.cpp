#include "redis/socket.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

#include "core/errno_text.h"

namespace fencelock::detail::redis {

Result<ConnectionPtr> Connection::start(const Endpoint& endpoint) {
  ConnectionPtr c(new Connection());
  c->address_ = endpoint_text(endpoint);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(endpoint.port);
  if (int rc = ::getaddrinfo(endpoint.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return Status(Code::kUnavailable, fmt::format("cannot connect to Redis at {}: {}", c->address_,
                                                  ::gai_strerror(rc)));
  }
  c->addresses_.reset(found);
  c->next_ = found;
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

void Connection::abort() {
  if (fd_ < 0) return;
  const linger reset{1, 0};
  (void)::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
}

}  // namespace fencelock::detail::redis
