#include "torture/shared_register.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include "core/mutex.h"

#include "core/errno_text.h"

namespace fencelock::torture {

Nanos monotonic_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

Nanos wall_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

sockaddr_un unix_address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path)
    throw std::runtime_error("register socket path too long: " + path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

}  // namespace

SharedRegister::SharedRegister(std::string path, FenceMode mode)
    : path_(std::move(path)), mode_(mode) {
  listener_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr = unix_address(path_);
  if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listener_, 64) != 0) {
    const std::string why = detail::errno_text(errno);
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
    fencelock::detail::MutexLock lock(mu_);
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
    fencelock::detail::MutexLock lock(mu_);
    connections_.push_back(fd);
    servers_.emplace_back([this, fd] { serve(fd); });
  }
}

void SharedRegister::serve(int fd) {
  Connection connection;
  std::string pending;
  char buf[512];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<std::size_t>(n));
    for (auto eol = pending.find('\n'); eol != std::string::npos; eol = pending.find('\n')) {
      std::string reply = handle(pending.substr(0, eol), connection) + "\n";
      pending.erase(0, eol + 1);
      if (::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL) < 0) break;
    }
  }
  if (connection.worker) leave(connection);
  fencelock::detail::MutexLock lock(mu_);
  std::erase(connections_, fd);
  ::close(fd);
}

std::string SharedRegister::handle(const std::string& line, Connection& connection) {
  std::istringstream in(line);
  std::string verb;
  RegisterEvent event;
  in >> verb >> event.worker >> event.worker_steady >> event.worker_wall;
  if (verb == "HELLO") {
    in >> event.pid;
  } else if (verb != "ACQUIRE" && verb != "TICK") {
    in >> event.token;
    if (verb == "WRITE") in >> event.value;
  }
  if (in.fail()) return "ERROR bad request";
  if (verb == "HELLO") {
    connection.worker = event.worker;
    connection.pid = event.pid;
  } else if (!connection.worker || *connection.worker != event.worker) {
    return "ERROR HELLO first";
  }
  event.pid = connection.pid;
  const FencingToken presented(event.token);
  fencelock::detail::MutexLock lock(mu_);
  event.at = monotonic_now();
  event.wall = wall_now();
  std::string reply = "OK";
  Inside& self = inside_[connection.pid];
  self.worker = event.worker;
  if (verb == "HELLO") {
    event.kind = RegisterEvent::kHello;
    hellos_.push_back(connection.pid);
  } else if (verb == "ACQUIRE") {
    event.kind = RegisterEvent::kAcquire;
  } else if (verb == "TICK") {
    event.kind = RegisterEvent::kTick;
  } else if (verb == "GRANT") {
    event.kind = RegisterEvent::kGrant;
  } else if (verb == "ENTER") {
    event.kind = RegisterEvent::kEnter;
    self.open++;
    Status admitted = mode_ == FenceMode::kFull ? gate_.admit(presented) : Status::Ok();
    event.accepted = admitted.ok();
    event.value = value_;
    self.read_pending = admitted.ok();
    reply = admitted.ok() ? fmt::format("OK {}", value_)
                          : fmt::format("STALE {}", gate_.highest().value());
  } else if (verb == "WRITE") {
    event.kind = RegisterEvent::kWrite;
    self.read_pending = false;
    // `assigned` is set where the value changes: the log says what happened to the register,
    // whatever status the gate reports.
    bool assigned = false;
    auto assign = [&]() FENCELOCK_REQUIRES(mu_) {  // run here or by gate_.run, with mu_ held
      value_ = event.value;
      assigned = true;
    };
    Status applied = Status::Ok();
    if (mode_ == FenceMode::kNone) {
      assign();
    } else {
      applied = gate_.run(presented, assign);
    }
    event.accepted = assigned;
    if (!applied.ok()) reply = fmt::format("STALE {}", gate_.highest().value());
  } else if (verb == "EXIT") {
    event.kind = RegisterEvent::kExit;
    if (self.open > 0) self.open--;
    self.read_pending = false;
  } else {
    return "ERROR unknown request";
  }
  event.highest = gate_.highest().value();
  events_.push_back(event);
  return reply;
}

void SharedRegister::leave(const Connection& connection) {
  fencelock::detail::MutexLock lock(mu_);
  inside_.erase(connection.pid);
  RegisterEvent event;
  event.kind = RegisterEvent::kLeave;
  event.worker = *connection.worker;
  event.pid = connection.pid;
  event.at = monotonic_now();
  events_.push_back(event);
}

std::vector<RegisterEvent> SharedRegister::events() const {
  fencelock::detail::MutexLock lock(mu_);
  return events_;
}

std::size_t SharedRegister::operation_count() const {
  fencelock::detail::MutexLock lock(mu_);
  return events_.size();
}

std::uint64_t SharedRegister::value() const {
  fencelock::detail::MutexLock lock(mu_);
  return value_;
}

std::optional<int> SharedRegister::worker_between_read_and_write(std::optional<int> except) const {
  fencelock::detail::MutexLock lock(mu_);
  for (const auto& [pid, inside] : inside_) {
    if (inside.read_pending && inside.worker != except) return inside.worker;
  }
  return std::nullopt;
}

std::optional<int> SharedRegister::worker_inside() const {
  fencelock::detail::MutexLock lock(mu_);
  for (const auto& [pid, inside] : inside_) {
    if (inside.read_pending) return inside.worker;
  }
  for (const auto& [pid, inside] : inside_) {
    if (inside.open > 0) return inside.worker;
  }
  return std::nullopt;
}

bool SharedRegister::has_said_hello(long pid) const {
  fencelock::detail::MutexLock lock(mu_);
  return std::find(hellos_.begin(), hellos_.end(), pid) != hellos_.end();
}

RegisterClient::RegisterClient(const std::string& path) {
  fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr = unix_address(path);
  if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const std::string why = detail::errno_text(errno);
    if (fd_ >= 0) ::close(fd_);
    throw std::runtime_error(fmt::format("cannot reach the register at {}: {}", path, why));
  }
}

RegisterClient::~RegisterClient() { ::close(fd_); }

std::string RegisterClient::request(const std::string& line) {
  fencelock::detail::MutexLock lock(mu_);
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
    if (n < 0 && errno == EINTR) continue;
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

namespace {
// "<worker> <steady_ns> <wall_ns>": the head of every request.
std::string head(int worker) {
  return fmt::format("{} {} {}", worker, monotonic_now(), wall_now());
}
}  // namespace

void RegisterClient::hello(int worker, long pid) {
  (void)request(fmt::format("HELLO {} {}", head(worker), pid));
}

void RegisterClient::acquiring(int worker) { (void)request("ACQUIRE " + head(worker)); }

void RegisterClient::granted(int worker, std::uint64_t token) {
  (void)request(fmt::format("GRANT {} {}", head(worker), token));
}

RegisterClient::Reply RegisterClient::enter(int worker, std::uint64_t token) {
  return parse_reply(request(fmt::format("ENTER {} {}", head(worker), token)));
}

RegisterClient::Reply RegisterClient::write(int worker, std::uint64_t token, std::uint64_t value) {
  return parse_reply(request(fmt::format("WRITE {} {} {}", head(worker), token, value)));
}

void RegisterClient::exit(int worker, std::uint64_t token) {
  (void)request(fmt::format("EXIT {} {}", head(worker), token));
}

void RegisterClient::tick(int worker) { (void)request("TICK " + head(worker)); }

const char* probe_result_name(ProbeResult result) {
  switch (result) {
    case ProbeResult::kNotProbed:
      return "not probed";
    case ProbeResult::kAnswered:
      return "answered";
    case ProbeResult::kSilent:
      return "silent";
    case ProbeResult::kRefused:
      return "refused";
    case ProbeResult::kUnknown:
      return "unknown";
  }
  return "unknown";
}

std::vector<GrantRecord> grants_of(const std::vector<RegisterEvent>& events) {
  std::map<long, Nanos> asked;  // by process: its last kAcquire
  std::vector<GrantRecord> out;
  for (const RegisterEvent& e : events) {
    if (e.kind == RegisterEvent::kAcquire) asked[e.pid] = e.at;
    if (e.kind != RegisterEvent::kGrant) continue;
    auto it = asked.find(e.pid);
    out.push_back({e.worker, e.pid, e.token, it == asked.end() ? e.at : it->second, e.at});
  }
  // The register appends under one mutex: already ordered by `at`.
  return out;
}

}  // namespace fencelock::torture
