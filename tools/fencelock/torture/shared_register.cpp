#include "torture/shared_register.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

namespace fencelock::torture {

Nanos monotonic_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

sockaddr_un unix_address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path)
    throw std::runtime_error("register socket path too long: " + path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

}  // namespace

SharedRegister::SharedRegister(std::string path, bool fenced)
    : path_(std::move(path)), fenced_(fenced) {
  listener_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr = unix_address(path_);
  if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listener_, 64) != 0) {
    const std::string why = std::strerror(errno);
    if (listener_ >= 0) ::close(listener_);
    throw std::runtime_error(fmt::format("register: cannot listen on {}: {}", path_, why));
  }
  acceptor_ = std::thread([this] { accept_loop(); });
}

SharedRegister::~SharedRegister() {
  stopping_ = true;
  ::shutdown(listener_, SHUT_RDWR);
  acceptor_.join();
  ::close(listener_);
  std::vector<std::thread> servers;
  {
    std::lock_guard lock(mu_);
    for (int fd : connections_) ::shutdown(fd, SHUT_RDWR);
    servers.swap(servers_);
  }
  for (auto& t : servers) t.join();
  ::unlink(path_.c_str());
}

void SharedRegister::accept_loop() {
  while (!stopping_.load()) {
    int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      return;
    }
    std::lock_guard lock(mu_);
    connections_.push_back(fd);
    servers_.emplace_back([this, fd] { serve(fd); });
  }
}

void SharedRegister::serve(int fd) {
  std::optional<int> worker;
  std::string pending;
  char buf[512];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    pending.append(buf, static_cast<std::size_t>(n));
    for (auto eol = pending.find('\n'); eol != std::string::npos; eol = pending.find('\n')) {
      std::string reply = handle(pending.substr(0, eol), worker) + "\n";
      pending.erase(0, eol + 1);
      if (::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL) < 0) break;
    }
  }
  if (worker) leave(*worker);
  std::lock_guard lock(mu_);
  std::erase(connections_, fd);
  ::close(fd);
}

std::string SharedRegister::handle(const std::string& line, std::optional<int>& worker_of_conn) {
  std::istringstream in(line);
  std::string verb;
  int worker = 0;
  std::uint64_t token = 0, value = 0;
  in >> verb >> worker >> token;
  if (verb == "WRITE") in >> value;
  if (in.fail()) return "ERROR bad request";
  worker_of_conn = worker;
  const FencingToken presented(token);
  std::lock_guard lock(mu_);
  RegisterEvent event;
  event.worker = worker;
  event.token = token;
  event.at = monotonic_now();
  std::string reply = "OK";
  if (verb == "ENTER") {
    event.kind = RegisterEvent::kEnter;
    for (const auto& [other, open] : inside_) event.overlapped |= other != worker && open > 0;
    inside_[worker]++;
    Status admitted = fenced_ ? gate_.admit(presented) : Status::Ok();
    event.accepted = admitted.ok();
    event.value = value_;
    read_pending_[worker] = admitted.ok();
    reply = admitted.ok() ? fmt::format("OK {}", value_)
                          : fmt::format("STALE {}", gate_.highest().value());
  } else if (verb == "WRITE") {
    event.kind = RegisterEvent::kWrite;
    event.value = value;
    read_pending_[worker] = false;
    Status applied = fenced_ ? gate_.run(presented, [&] { value_ = value; }) : Status::Ok();
    if (!fenced_) value_ = value;
    event.accepted = applied.ok();
    if (!applied.ok()) reply = fmt::format("STALE {}", gate_.highest().value());
  } else if (verb == "EXIT") {
    event.kind = RegisterEvent::kExit;
    if (auto it = inside_.find(worker); it != inside_.end() && it->second > 0) it->second--;
    read_pending_[worker] = false;
  } else {
    return "ERROR unknown request";
  }
  event.highest = gate_.highest().value();
  events_.push_back(event);
  return reply;
}

void SharedRegister::leave(int worker) {
  std::lock_guard lock(mu_);
  inside_.erase(worker);
  read_pending_.erase(worker);
}

std::vector<RegisterEvent> SharedRegister::events() const {
  std::lock_guard lock(mu_);
  return events_;
}

std::size_t SharedRegister::operation_count() const {
  std::lock_guard lock(mu_);
  return events_.size();
}

std::uint64_t SharedRegister::value() const {
  std::lock_guard lock(mu_);
  return value_;
}

std::optional<int> SharedRegister::worker_between_read_and_write() const {
  std::lock_guard lock(mu_);
  for (const auto& [worker, pending] : read_pending_) {
    if (pending) return worker;
  }
  return std::nullopt;
}

std::optional<int> SharedRegister::worker_inside() const {
  std::lock_guard lock(mu_);
  for (const auto& [worker, pending] : read_pending_) {
    if (pending) return worker;
  }
  for (const auto& [worker, open] : inside_) {
    if (open > 0) return worker;
  }
  return std::nullopt;
}

RegisterClient::RegisterClient(const std::string& path) {
  fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr = unix_address(path);
  if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const std::string why = std::strerror(errno);
    if (fd_ >= 0) ::close(fd_);
    throw std::runtime_error(fmt::format("cannot reach the register at {}: {}", path, why));
  }
}

RegisterClient::~RegisterClient() { ::close(fd_); }

std::string RegisterClient::request(const std::string& line) {
  const std::string out = line + "\n";
  if (::send(fd_, out.data(), out.size(), MSG_NOSIGNAL) < 0)
    throw std::runtime_error("register connection lost");
  for (;;) {
    if (auto eol = buffer_.find('\n'); eol != std::string::npos) {
      std::string reply = buffer_.substr(0, eol);
      buffer_.erase(0, eol + 1);
      return reply;
    }
    char buf[256];
    ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n <= 0) throw std::runtime_error("register connection lost");
    buffer_.append(buf, static_cast<std::size_t>(n));
  }
}

namespace {
RegisterClient::Reply parse_reply(const std::string& reply) {
  std::istringstream in(reply);
  std::string word;
  RegisterClient::Reply out;
  in >> word >> out.number;
  out.ok = word == "OK";
  return out;
}
}  // namespace

RegisterClient::Reply RegisterClient::enter(int worker, std::uint64_t token) {
  return parse_reply(request(fmt::format("ENTER {} {}", worker, token)));
}

RegisterClient::Reply RegisterClient::write(int worker, std::uint64_t token, std::uint64_t value) {
  return parse_reply(request(fmt::format("WRITE {} {} {}", worker, token, value)));
}

void RegisterClient::exit(int worker, std::uint64_t token) {
  (void)request(fmt::format("EXIT {} {}", worker, token));
}

}  // namespace fencelock::torture
