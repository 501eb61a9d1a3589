#include "torture/server_probe.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>

#include "core/backend_registry.h"
#include "core/uri.h"

namespace fencelock::torture {

namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// At most this much of an INFO reply is read (a real one is about 5 KB).
constexpr std::size_t kMaxInfo = 1 << 20;

int remaining_ms(Clock::time_point until) {
  const auto left = std::chrono::duration_cast<milliseconds>(until - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 60'000));
}

// A non-blocking TCP connection under one deadline.
class Connection {
 public:
  Connection(const HostPort& server, Clock::time_point until) : until_(until) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const std::string port = std::to_string(server.port);
    if (::getaddrinfo(server.host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
      result_ = ProbeResult::kUnknown;
      return;
    }
    fd_ = ::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd_ < 0) {
      ::freeaddrinfo(found);
      result_ = ProbeResult::kUnknown;
      return;
    }
    const int rc = ::connect(fd_, found->ai_addr, found->ai_addrlen);
    const int connect_errno = errno;
    ::freeaddrinfo(found);
    if (rc != 0 && connect_errno != EINPROGRESS) {
      result_ = failure(connect_errno);
      return;
    }
    if (rc != 0) {
      pollfd p{fd_, POLLOUT, 0};
      if (::poll(&p, 1, remaining_ms(until_)) <= 0) {
        result_ = ProbeResult::kSilent;  // a full listen backlog of a stopped server
        return;
      }
      int error = 0;
      socklen_t len = sizeof error;
      ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &error, &len);
      if (error != 0) {
        result_ = failure(error);
        return;
      }
    }
    connected_ = true;
  }
  ~Connection() {
    if (fd_ >= 0) ::close(fd_);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // nullopt while connected; else what the connection attempt showed.
  std::optional<ProbeResult> failed() const {
    return connected_ ? std::nullopt : std::optional(result_);
  }

  // Sends all of `bytes`; the probe result of a failure, or nullopt.
  std::optional<ProbeResult> send_all(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n > 0) {
        bytes.remove_prefix(static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno != EAGAIN && errno != EINTR) return failure(errno);
      pollfd p{fd_, POLLOUT, 0};
      if (::poll(&p, 1, remaining_ms(until_)) <= 0) return ProbeResult::kSilent;
    }
    return std::nullopt;
  }

  // Appends what arrives to `out`: >0 bytes read, 0 the server closed, -1 nothing by the
  // deadline, -2 the connection failed (reset).
  int receive(std::string& out) {
    for (;;) {
      char buffer[4096];
      const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
      if (n > 0) {
        out.append(buffer, static_cast<std::size_t>(n));
        return static_cast<int>(n);
      }
      if (n == 0) return 0;
      if (errno != EAGAIN && errno != EINTR) return -2;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, remaining_ms(until_)) <= 0) return -1;
    }
  }

 private:
  static ProbeResult failure(int error) {
    return error == ECONNREFUSED || error == ECONNRESET || error == EPIPE ? ProbeResult::kRefused
                                                                          : ProbeResult::kUnknown;
  }

  Clock::time_point until_;
  int fd_ = -1;
  bool connected_ = false;
  ProbeResult result_ = ProbeResult::kUnknown;
};

std::string request_of(ProbeProtocol protocol) {
  switch (protocol) {
    case ProbeProtocol::kRedis:
      return "PING\r\n";
    case ProbeProtocol::kPostgres:
      // SSLRequest: length 8, code 80877103; the server answers one byte ('S' or 'N').
      return std::string("\x00\x00\x00\x08\x04\xd2\x16\x2f", 8);
    case ProbeProtocol::kEtcd:
      return "GET /version HTTP/1.0\r\n\r\n";
  }
  return "";
}

// One RESP command as an array of bulk strings.
std::string resp(std::initializer_list<std::string_view> words) {
  std::string out = fmt::format("*{}\r\n", words.size());
  for (std::string_view w : words) out += fmt::format("${}\r\n{}\r\n", w.size(), w);
  return out;
}

enum class InfoReply { kIncomplete, kRefused, kMalformed, kDone };

// Where the text of an INFO reply lies in `reply` (after AUTH's "+OK" line when `auth`): sets
// `info` once all of it has arrived.
InfoReply find_info(std::string_view reply, bool auth, std::string_view& info) {
  std::size_t at = 0;
  if (auth) {
    if (!reply.empty() && reply[0] == '-') return InfoReply::kRefused;
    at = reply.find("\r\n");
    if (at == std::string_view::npos) return InfoReply::kIncomplete;
    at += 2;
  }
  if (reply.size() <= at) return InfoReply::kIncomplete;
  if (reply[at] == '-') return InfoReply::kRefused;  // NOAUTH
  if (reply[at] != '$') return InfoReply::kMalformed;
  const std::size_t line_end = reply.find("\r\n", at);
  if (line_end == std::string_view::npos) return InfoReply::kIncomplete;
  std::size_t length = 0;
  const char* digits = reply.data() + at + 1;
  const auto parsed = std::from_chars(digits, reply.data() + line_end, length);
  if (parsed.ec != std::errc() || parsed.ptr != reply.data() + line_end || length > kMaxInfo)
    return InfoReply::kMalformed;
  if (reply.size() < line_end + 2 + length) return InfoReply::kIncomplete;
  info = reply.substr(line_end + 2, length);
  return InfoReply::kDone;
}

// The integer after "NAME:" at the start of a line of an INFO reply, or nullopt.
std::optional<std::int64_t> info_field(std::string_view info, std::string_view name) {
  for (std::size_t at = 0; at < info.size();) {
    const std::size_t end = std::min(info.find('\n', at), info.size());
    const std::string_view line = info.substr(at, end - at);
    at = end + 1;
    if (line.size() <= name.size() || !line.starts_with(name) || line[name.size()] != ':') continue;
    const std::string_view digits = line.substr(name.size() + 1);
    std::int64_t value = 0;
    const auto parsed = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (parsed.ec != std::errc() || parsed.ptr == digits.data()) return std::nullopt;
    return value;
  }
  return std::nullopt;
}

}  // namespace

std::optional<ProbeProtocol> probe_protocol(std::string_view uri) {
  const detail::BackendPlugin* plugin = detail::find_backend_plugin(uri);
  if (plugin == nullptr) return std::nullopt;
  if (plugin->family == "redis") return ProbeProtocol::kRedis;
  if (plugin->family == "postgres") return ProbeProtocol::kPostgres;
  if (plugin->family == "etcd") return ProbeProtocol::kEtcd;
  return std::nullopt;
}

ProbeResult probe_server(const HostPort& server, ProbeProtocol protocol, milliseconds deadline) {
  Connection connection(server, Clock::now() + deadline);
  if (auto failed = connection.failed()) return *failed;
  if (auto failed = connection.send_all(request_of(protocol))) return *failed;
  std::string reply;
  const int got = connection.receive(reply);
  if (got >= 0) return ProbeResult::kAnswered;  // a reply, or a close: the process runs
  return got == -1 ? ProbeResult::kSilent : ProbeResult::kRefused;
}

ProbeResult probe_until(const HostPort& server, ProbeProtocol protocol, ProbeResult wanted,
                        milliseconds deadline, milliseconds limit) {
  const auto until = Clock::now() + limit;
  for (;;) {
    const auto started = Clock::now();
    const ProbeResult result = probe_server(server, protocol, deadline);
    if (result == wanted || Clock::now() >= until) return result;
    std::this_thread::sleep_until(started + milliseconds(50));
  }
}

std::optional<RedisMemory> redis_memory(const HostPort& server, const std::string& uri,
                                        milliseconds deadline, std::string& why) {
  const std::string where = fmt::format("{}:{}", server.host, server.port);
  auto parsed = detail::parse_uri(uri, 6379);
  if (!parsed.ok()) {
    why = "the backend URI: " + parsed.status().message();
    return std::nullopt;
  }
  if (parsed->scheme == "rediss") {
    why = fmt::format("INFO of {} over TLS is not read", where);
    return std::nullopt;
  }
  std::string user = parsed->user, password = parsed->password;
  bool has_password = parsed->has_password;
  if (!has_password) {
    if (const char* env = std::getenv("FENCELOCK_REDIS_PASSWORD"); env != nullptr) {
      password = env;
      has_password = true;
    }
  }
  if (user.empty()) {
    if (const char* env = std::getenv("FENCELOCK_REDIS_USER"); env != nullptr) user = env;
  }
  Connection connection(server, Clock::now() + deadline);
  if (connection.failed()) {
    why = fmt::format("cannot connect to {} to read INFO", where);
    return std::nullopt;
  }
  std::string request;
  if (has_password)
    request = user.empty() ? resp({"AUTH", password}) : resp({"AUTH", user, password});
  request += resp({"INFO"});
  if (connection.send_all(request)) {
    why = fmt::format("{} did not take the INFO request", where);
    return std::nullopt;
  }
  std::string reply;
  std::string_view info;
  for (InfoReply state = find_info(reply, has_password, info); state != InfoReply::kDone;
       state = find_info(reply, has_password, info)) {
    if (state == InfoReply::kRefused) {
      why = fmt::format("{} refused INFO with the credentials of the backend URI", where);
      return std::nullopt;
    }
    if (state == InfoReply::kMalformed) {
      why = fmt::format("{} did not answer INFO with its text", where);
      return std::nullopt;
    }
    if (reply.size() > kMaxInfo + 64 || connection.receive(reply) <= 0) {
      why = fmt::format("{} did not answer INFO in time", where);
      return std::nullopt;
    }
  }
  auto evicted = info_field(info, "evicted_keys");
  auto used = info_field(info, "used_memory");
  auto max = info_field(info, "maxmemory");
  if (!evicted || !used || !max) {
    why = fmt::format("{}'s INFO has no evicted_keys, used_memory or maxmemory", where);
    return std::nullopt;
  }
  return RedisMemory{*evicted, *used, *max};
}

}  // namespace fencelock::torture
