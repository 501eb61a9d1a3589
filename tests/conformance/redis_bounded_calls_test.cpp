// Every Redis call is bounded by its deadline, whatever one instance does, and no instance's
// behaviour delays another's part of the call (against real redis-server processes; the
// misbehaving instance is a real server stopped with SIGSTOP, a proxy that replaces a reply, or
// a listener that answers one byte at a time):
// - a stopped instance whose socket no longer takes bytes holds up neither the writes to the
//   others nor their replies;
// - an instance that answers `*2147483647\r\n` (13 bytes announcing 2^31 - 1 elements) is
//   refused at once, not answered with a 16 GiB reservation and a wait for elements;
// - an instance that sends one byte every 100 ms forever neither stalls Client::connect nor
//   keeps a Redlock acquisition or an inspection from the two healthy instances' answer;
// - `list` against a server whose SCAN cursor never returns to 0 ends at its bounds
//   (ListOptions: the most locks, the time for the whole listing) instead of paging on for
//   hours while its memory grows.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "fencelock/client.h"
#include "redis/connection.h"
#include "redis/resp_reader.h"
#include "support/delay_proxy.h"
#include "support/process.h"
#include "support/redis_server.h"

namespace fencelock::testing {
namespace {

using namespace std::chrono_literals;
using detail::Clock;
using detail::redis::fan_out;
using detail::redis::format_command;
using detail::redis::Instance;
using detail::redis::InstanceCall;

detail::redis::ConnectSpec spec_for(std::uint16_t port, std::chrono::milliseconds connect_timeout) {
  detail::redis::ConnectSpec spec;
  spec.endpoint = detail::Endpoint{"127.0.0.1", port};
  spec.connect_timeout = connect_timeout;
  return spec;
}

// One PING through each instance, so that each has an idle, set-up connection in its pool.
void warm_up(std::vector<Instance*> instances) {
  const std::string ping = format_command({"PING"});
  std::vector<InstanceCall> calls(instances.size());
  for (std::size_t i = 0; i < instances.size(); ++i) {
    calls[i].instance = instances[i];
    calls[i].commands = {&ping};
  }
  fan_out(calls, Clock::now() + 10s);
  for (const auto& call : calls) ASSERT_TRUE(call.error.ok()) << call.error.to_string();
}

TEST(RedisBoundedCalls, AStoppedInstanceWhoseSocketIsFullHoldsUpNoOtherInstance) {
  auto stopped = RedisServer::start();
  auto b = RedisServer::start();
  auto c = RedisServer::start();
  // A long connect timeout: before, a write to a full socket waited for it (the socket's send
  // timeout), and the instances after it got their commands only then.
  Instance ia(spec_for(stopped->port(), 10s));
  Instance ib(spec_for(b->port(), 10s));
  Instance ic(spec_for(c->port(), 10s));
  warm_up({&ia, &ib, &ic});
  stopped->pause();
  // 48 MiB of commands per instance: more than loopback's socket buffers at both ends take.
  const std::string echo = format_command({"ECHO", std::string(std::size_t{1} << 20, 'e')});
  std::vector<const std::string*> commands(48, &echo);
  std::vector<InstanceCall> calls(3);
  Instance* order[] = {&ia, &ib, &ic};  // the stopped one first, as in a URI
  for (std::size_t i = 0; i < 3; ++i) {
    calls[i].instance = order[i];
    calls[i].commands = commands;
  }
  // The call runs beside the test; the stopped instance stays stopped until the other two have
  // run every command (their own count of ECHO calls says so), however long this build takes
  // to move 48 MiB (a fixed 4 s was too short for TSan under load).
  auto call = std::async(std::launch::async, [&] { fan_out(calls, Clock::now() + 120s); });
  const auto echoes = [](RedisServer& server) {
    const std::string stats = server.command({"INFO", "commandstats"});
    const auto at = stats.find("cmdstat_echo:calls=");
    return at == std::string::npos ? 0 : std::atoi(stats.c_str() + at + 19);
  };
  const bool others_done =
      eventually([&] { return echoes(*b) == 48 && echoes(*c) == 48; }, 100s, 10ms);
  stopped->resume();
  call.wait();
  EXPECT_TRUE(others_done) << "the healthy instances did not get every command while the first "
                              "one was stopped";
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(calls[i].error.ok()) << calls[i].error.to_string();
    EXPECT_EQ(calls[i].replies.size(), commands.size());
  }
}

TEST(RedisBoundedCalls, AReplyAnnouncingTwoToTheThirtyOneElementsIsRefusedAtOnce) {
  auto server = RedisServer::start();
  auto proxy = DelayProxy::start(server->port());
  Instance hostile(spec_for(proxy->port(), 2s));
  warm_up({&hostile});
  proxy->replace_reply("hostile-marker", "*2147483647\r\n");
  const std::string echo = format_command({"ECHO", "hostile-marker"});
  std::vector<InstanceCall> calls(1);
  calls[0].instance = &hostile;
  calls[0].commands = {&echo};
  // Before: hiredis reserved 16 GiB for the header and waited for elements until the deadline
  // (kDeadlineExceeded), then spent seconds freeing them.
  fan_out(calls, Clock::now() + 10s);
  ASSERT_EQ(proxy->replaced(), 1);
  ASSERT_FALSE(calls[0].error.ok());
  EXPECT_EQ(calls[0].error.code(), Code::kUnavailable) << calls[0].error.to_string();
  EXPECT_NE(calls[0].error.message().find("an array of 2147483647"), std::string::npos)
      << calls[0].error.to_string();
  // The instance serves the next call on a new connection.
  const std::string ping = format_command({"PING"});
  calls[0].commands = {&ping};
  fan_out(calls, Clock::now() + 10s);
  EXPECT_TRUE(calls[0].error.ok()) << calls[0].error.to_string();
}

// One Redlock instance of three stopped: the other two renew the lease, and each renewal
// round's outcome is applied while more than half the TTL of validity is left, which is when
// `fencelock run` stops its command (it sends SIGTERM so that the command can exit before the
// validity ends). Before, a round waited a quarter of the TTL for the stopped instance after
// the majority had answered, and applied its outcome with 5/12 of the TTL left: run stopped its
// command with two healthy instances of three. Validity is sampled every 10 ms over two rounds.
TEST(RedisBoundedCalls, AStoppedMinorityInstanceNeverLeavesALeaseWithHalfItsTtlOrLess) {
  auto a = RedisServer::start();
  auto b = RedisServer::start();
  auto c = RedisServer::start();
  auto client = Client::connect(fmt::format("redlock://127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}",
                                            a->port(), b->port(), c->port()));
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  constexpr std::chrono::milliseconds kTtl = 3s;
  auto lease = client->acquire(*LockKey::make("stopped-minority"), {.ttl = kTtl});
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  a->pause();
  const auto first_validity = lease->valid_until();
  auto least_left = Clock::duration::max();
  int renewals_seen = 0;
  auto last_validity = first_validity;
  const auto until = Clock::now() + kTtl * 2;
  while (Clock::now() < until && !lease->is_lost()) {
    const auto valid_until = lease->valid_until();
    if (valid_until != last_validity) {
      renewals_seen++;
      last_validity = valid_until;
    }
    least_left = std::min(least_left, valid_until - Clock::now());
    std::this_thread::sleep_for(10ms);
  }
  a->resume();
  std::printf("least validity left %lld ms, %d renewals\n",
              static_cast<long long>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(least_left).count()),
              renewals_seen);
  EXPECT_FALSE(lease->is_lost());
  EXPECT_GE(renewals_seen, 2) << "two healthy instances of three must renew the lease";
  EXPECT_GT(least_left, Clock::duration(kTtl / 2))
      << "validity left dipped to "
      << std::chrono::duration_cast<std::chrono::milliseconds>(least_left).count() << " ms";
}

// A host given by name is looked up on a Lookup thread (a numeric one never is), and its
// addresses serve the connections the Client opens: a grant and a release through "localhost".
// Also what runs the lookup thread and the address cache under TSan.
TEST(RedisBoundedCalls, AHostGivenByNameIsLookedUpAndServesTheCalls) {
  auto server = RedisServer::start();
  auto client = Client::connect(fmt::format("redlock://localhost:{}", server->port()));
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  for (int i = 0; i < 3; ++i) {
    auto lease = client->acquire(*LockKey::make("by-name"), {.ttl = 5s});
    ASSERT_TRUE(lease.ok()) << lease.status().to_string();
    EXPECT_TRUE(lease->release().ok());
  }
}

// A listening socket on a free loopback port, and a pipe whose read end wakes a fake server's
// poll() loop when it is to stop (a test fake's plumbing).
class LoopbackListener {
 public:
  LoopbackListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(fd_, 64) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
        ::pipe2(stop_, O_CLOEXEC) != 0) {
      throw std::runtime_error("LoopbackListener: cannot listen");
    }
    port_ = ntohs(addr.sin_port);
  }
  ~LoopbackListener() {
    for (int fd : {fd_, stop_[0], stop_[1]}) ::close(fd);
  }
  LoopbackListener(const LoopbackListener&) = delete;
  LoopbackListener& operator=(const LoopbackListener&) = delete;

  int fd() const { return fd_; }
  int stop_fd() const { return stop_[0]; }  // readable once stop() was called
  std::uint16_t port() const { return port_; }
  void stop() { (void)!::write(stop_[1], "s", 1); }

 private:
  int fd_ = -1;
  int stop_[2] = {-1, -1};
  std::uint16_t port_ = 0;
};

// A server that accepts every connection, reads and drops what it is sent, and answers each
// connection with "+" and then one byte every 100 ms, forever: a status reply that never ends.
class DripServer {
 public:
  DripServer() : thread_([this] { serve(); }) {}
  ~DripServer() {
    listener_.stop();
    thread_.join();
  }
  std::uint16_t port() const { return listener_.port(); }
  int connections() const { return connections_.load(); }

 private:
  void serve() {
    std::vector<int> clients;
    while (true) {
      std::vector<pollfd> fds = {{listener_.stop_fd(), POLLIN, 0}, {listener_.fd(), POLLIN, 0}};
      for (int fd : clients) fds.push_back({fd, POLLIN, 0});
      ::poll(fds.data(), fds.size(), 100);
      if (fds[0].revents != 0) break;
      if (fds[1].revents != 0) {
        const int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd >= 0) {
          (void)!::send(fd, "+", 1, MSG_NOSIGNAL);
          clients.push_back(fd);
          connections_++;
        }
      }
      char sink[4096];
      for (std::size_t k = 2; k < fds.size(); ++k) {
        if (fds[k].revents != 0) (void)!::recv(fds[k].fd, sink, sizeof sink, 0);
      }
      const auto now = std::chrono::steady_clock::now();
      if (now - last_drip_ >= 100ms) {
        last_drip_ = now;
        for (int fd : clients) (void)!::send(fd, "x", 1, MSG_NOSIGNAL);
      }
    }
    for (int fd : clients) ::close(fd);
  }

  LoopbackListener listener_;
  std::atomic<int> connections_{0};
  std::chrono::steady_clock::time_point last_drip_{};
  std::thread thread_;  // last: starts once the members above exist
};

TEST(RedisBoundedCalls, ADrippingRedlockInstanceDelaysNeitherConnectNorAGrantNorAnInspection) {
  auto b = RedisServer::start();
  auto c = RedisServer::start();
  DripServer drip;
  const std::string uri = fmt::format("redlock://127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}",
                                      drip.port(), b->port(), c->port());
  // Run on a thread so that a call that never returns fails the test instead of hanging it:
  // before, each drip reset hiredis's per-read timeout and connect() never returned.
  auto outcome = std::async(std::launch::async, [&]() -> std::string {
    ClientOptions options;
    options.connect_timeout = 1s;
    auto client = Client::connect(uri, options);
    if (!client.ok()) return "connect: " + client.status().to_string();
    const LockKey key = *LockKey::make("dripping-instance");
    AcquireOptions wait;
    wait.wait = 2s;
    auto lease = client->acquire(key, wait);
    if (!lease.ok()) return "acquire: " + lease.status().to_string();
    auto holder = client->inspect(key);
    if (!holder.ok()) return "inspect: " + holder.status().to_string();
    if (!holder->has_value()) return "inspect: the lock shows no holder";
    if (Status released = lease->release(); !released.ok()) {
      return "release: " + released.to_string();
    }
    return "";
  });
  // A hang detector only: the calls above are each bounded by about a second.
  ASSERT_EQ(outcome.wait_for(120s), std::future_status::ready)
      << "still waiting after 120 s: a dripping instance held a call past its deadline";
  EXPECT_EQ(outcome.get(), "");
  EXPECT_GE(drip.connections(), 1);  // the dripping instance was tried
}

// Enough of a Redis server for Client::connect and list (a test fake, one thread): PING, SCRIPT
// LOAD and CONFIG GET are answered as Redis does, and SCAN with a cursor that never returns to
// 0: each page names 1,000 lock keys, new ones on every page unless `repeat_pages`.
class EndlessScanServer {
 public:
  explicit EndlessScanServer(bool repeat_pages)
      : repeat_pages_(repeat_pages), thread_([this] { serve(); }) {}
  ~EndlessScanServer() {
    listener_.stop();
    thread_.join();
  }
  std::uint16_t port() const { return listener_.port(); }
  int pages() const { return pages_.load(); }

 private:
  struct Peer {
    int fd;
    std::unique_ptr<detail::redis::RespReader> reader;
  };

  std::string answer(const redisReply& command) {
    const std::string name(command.element[0]->str, command.element[0]->len);
    if (name == "PING") return "+PONG\r\n";
    if (name == "SCRIPT") return "$40\r\n" + std::string(40, 'a') + "\r\n";
    if (name == "CONFIG") return "*0\r\n";
    if (name == "SCAN") {
      const int page = pages_++;
      std::string reply = "*2\r\n$1\r\n7\r\n*1000\r\n";
      for (int i = 0; i < 1000; ++i) {
        const std::string key =
            fmt::format("fencelock:{{endless-{}-{}}}", repeat_pages_ ? 0 : page, i);
        reply += fmt::format("${}\r\n{}\r\n", key.size(), key);
      }
      return reply;
    }
    return "-ERR not in this fake\r\n";
  }

  void serve() {
    std::vector<Peer> peers;
    while (true) {
      std::vector<pollfd> fds = {{listener_.stop_fd(), POLLIN, 0}, {listener_.fd(), POLLIN, 0}};
      for (const Peer& peer : peers) fds.push_back({peer.fd, POLLIN, 0});
      ::poll(fds.data(), fds.size(), -1);
      if (fds[0].revents != 0) break;
      if (fds[1].revents != 0) {
        const int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) peers.push_back({fd, std::make_unique<detail::redis::RespReader>()});
      }
      for (std::size_t k = 2; k < fds.size(); ++k) {
        if (fds[k].revents == 0) continue;
        Peer& peer = peers[k - 2];
        char buffer[65536];
        const ssize_t n = ::recv(peer.fd, buffer, sizeof buffer, 0);
        if (n <= 0 || !peer.reader->feed({buffer, static_cast<std::size_t>(n)}).ok()) continue;
        while (true) {
          auto command = peer.reader->next();
          if (!command.ok() || !*command) break;
          const std::string reply = answer(**command);
          (void)!::send(peer.fd, reply.data(), reply.size(), MSG_NOSIGNAL);
        }
      }
    }
    for (const Peer& peer : peers) ::close(peer.fd);
  }

  const bool repeat_pages_;
  LoopbackListener listener_;
  std::atomic<int> pages_{0};
  std::thread thread_;  // last: starts once the members above exist
};

Client connect_or_fail(const std::string& uri) {
  auto client = Client::connect(uri);
  if (!client.ok()) throw std::runtime_error(client.status().to_string());
  return std::move(*client);
}

TEST(RedisBoundedCalls, AListWhoseScanNeverEndsStopsAtTheMostLocksAsked) {
  EndlessScanServer server(/*repeat_pages=*/false);
  Client client = connect_or_fail(fmt::format("redis://127.0.0.1:{}", server.port()));
  // Before: 100,000 pages of new names (100 million) were read into memory.
  auto listed = client.list("", ListOptions{.timeout = 60s, .max_locks = 5'000});
  ASSERT_FALSE(listed.ok());
  EXPECT_EQ(listed.status().code(), Code::kInvalidArgument) << listed.status().to_string();
  EXPECT_NE(listed.status().message().find("more than 5000 locks"), std::string::npos)
      << listed.status().to_string();
  EXPECT_LE(server.pages(), 6);
}

TEST(RedisBoundedCalls, AListWhoseScanNeverEndsStopsAtItsTimeout) {
  EndlessScanServer server(/*repeat_pages=*/true);
  Client client = connect_or_fail(fmt::format("redis://127.0.0.1:{}", server.port()));
  // The same 1,000 names on every page: no bound on names is reached, only the time. Before:
  // 100,000 pages, then an answer as if the listing had ended.
  auto listed = client.list("", ListOptions{.timeout = 500ms});
  ASSERT_FALSE(listed.ok());
  EXPECT_EQ(listed.status().code(), Code::kDeadlineExceeded) << listed.status().to_string();
  EXPECT_NE(listed.status().message().find("did not finish in time"), std::string::npos)
      << listed.status().to_string();
}

TEST(RedisBoundedCalls, ListRefusesBoundsThatAllowNothing) {
  Client client = connect_or_fail("memory://bounds");
  EXPECT_EQ(client.list("", ListOptions{.timeout = 0ms}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(client.list("", ListOptions{.max_locks = 0}).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace fencelock::testing
