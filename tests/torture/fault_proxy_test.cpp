// The fault proxy (tools/fencelock/torture/fault_proxy.h) between a test client and a loopback
// echo server: bytes pass, latency delays them, drop resets connections, a black hole holds the
// bytes until it is lifted.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "torture/fault_proxy.h"

namespace fencelock::torture {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Echoes every byte back, one thread per connection, until destroyed.
class EchoServer {
 public:
  EchoServer() {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ::listen(listener_, 16);
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] {
      for (;;) {
        int fd = ::accept(listener_, nullptr, nullptr);
        if (fd < 0) return;
        accepted_++;
        echoes_.emplace_back([fd] {
          char buf[4096];
          for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) {
            if (::send(fd, buf, static_cast<std::size_t>(n), MSG_NOSIGNAL) < 0) break;
          }
          ::close(fd);
        });
      }
    });
  }
  ~EchoServer() {
    ::shutdown(listener_, SHUT_RDWR);
    ::close(listener_);
    acceptor_.join();
    for (auto& t : echoes_) t.join();
  }
  std::uint16_t port() const { return port_; }
  int accepted() const { return accepted_.load(); }

 private:
  int listener_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<int> accepted_{0};
  std::thread acceptor_;
  std::vector<std::thread> echoes_;  // joined after the listener closes (their peers close)
};

int dial(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  return fd;
}

// Reads `n` bytes within `limit`; what arrived (shorter on timeout, "" + errno on reset).
std::string read_n(int fd, std::size_t n, std::chrono::milliseconds limit, bool* reset = nullptr) {
  std::string out;
  const auto until = Clock::now() + limit;
  while (out.size() < n && Clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (::poll(&p, 1, static_cast<int>(std::max<long>(left.count(), 0))) <= 0) break;
    char buf[256];
    ssize_t got = ::read(fd, buf, std::min(sizeof buf, n - out.size()));
    if (got <= 0) {
      if (reset != nullptr) *reset = true;
      break;
    }
    out.append(buf, static_cast<std::size_t>(got));
  }
  return out;
}

TEST(FaultProxy, ForwardsBytesBothWaysWithoutAFault) {
  EchoServer echo;
  FaultProxy proxy("127.0.0.1", echo.port());
  int fd = dial(proxy.port());
  ASSERT_EQ(::send(fd, "ping", 4, 0), 4);
  EXPECT_EQ(read_n(fd, 4, 2s), "ping");
  ::close(fd);
}

TEST(FaultProxy, LatencyHoldsEveryChunkForTheDelayEachWay) {
  EchoServer echo;
  FaultProxy proxy("127.0.0.1", echo.port());
  proxy.set_fault(NetworkFault::kLatency, 150ms);
  int fd = dial(proxy.port());
  const auto start = Clock::now();
  ASSERT_EQ(::send(fd, "slow", 4, 0), 4);
  EXPECT_EQ(read_n(fd, 4, 5s), "slow");
  EXPECT_GE(Clock::now() - start, 300ms);  // 150 ms up, 150 ms down
  ::close(fd);
}

TEST(FaultProxy, DropResetsOpenConnectionsAndRefusesNewOnesUntilLifted) {
  EchoServer echo;
  FaultProxy proxy("127.0.0.1", echo.port());
  int fd = dial(proxy.port());
  ASSERT_EQ(::send(fd, "a", 1, 0), 1);
  ASSERT_EQ(read_n(fd, 1, 2s), "a");
  proxy.set_fault(NetworkFault::kDrop);
  bool reset = false;
  EXPECT_EQ(read_n(fd, 1, 2s, &reset), "");
  EXPECT_TRUE(reset) << "the open connection was not reset";
  ::close(fd);
  int refused = dial(proxy.port());
  bool refused_reset = false;
  (void)::send(refused, "b", 1, MSG_NOSIGNAL);
  EXPECT_EQ(read_n(refused, 1, 2s, &refused_reset), "");
  EXPECT_TRUE(refused_reset) << "a new connection got through a drop";
  ::close(refused);
  proxy.set_fault(NetworkFault::kNone);
  int again = dial(proxy.port());
  ASSERT_EQ(::send(again, "c", 1, 0), 1);
  EXPECT_EQ(read_n(again, 1, 2s), "c");
  ::close(again);
}

TEST(FaultProxy, ABlackHoleHoldsTheBytesUntilTheFaultIsLifted) {
  EchoServer echo;
  FaultProxy proxy("127.0.0.1", echo.port());
  int fd = dial(proxy.port());
  ASSERT_EQ(::send(fd, "x", 1, 0), 1);
  ASSERT_EQ(read_n(fd, 1, 2s), "x");
  proxy.set_fault(NetworkFault::kBlackhole);
  ASSERT_EQ(::send(fd, "held", 4, 0), 4);
  EXPECT_EQ(read_n(fd, 4, 500ms), "") << "bytes crossed a black hole";
  proxy.set_fault(NetworkFault::kNone);
  EXPECT_EQ(read_n(fd, 4, 2s), "held");
  ::close(fd);
}

// delay-one: one chunk (a request, or a reply) on one connection is held while another connection
// flows: what was sent first arrives last (reordering across connections, not latency).
TEST(FaultProxy, DelayOneHoldsOneChunkOnOneConnectionWhileOthersFlow) {
  for (NetworkFault fault : {NetworkFault::kDelayOneRequest, NetworkFault::kDelayOneReply}) {
    SCOPED_TRACE(fault == NetworkFault::kDelayOneRequest ? "request" : "reply");
    EchoServer echo;
    FaultProxy proxy("127.0.0.1", echo.port());
    int a = dial(proxy.port());
    int b = dial(proxy.port());
    for (int fd : {a, b}) {
      ASSERT_EQ(::send(fd, "x", 1, 0), 1);
      ASSERT_EQ(read_n(fd, 1, 2s), "x");
    }
    proxy.set_fault(fault, 3s);
    const std::uint64_t before = proxy.fault_actions();
    ASSERT_EQ(::send(a, "first", 5, 0), 5);
    const auto until = Clock::now() + 5s;
    while (proxy.fault_actions() == before && Clock::now() < until)
      std::this_thread::sleep_for(1ms);
    ASSERT_GT(proxy.fault_actions(), before) << "nothing was held";
    ASSERT_EQ(::send(b, "later", 5, 0), 5);
    EXPECT_EQ(read_n(b, 5, 5s), "later") << "the other connection did not flow";
    pollfd p{a, POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 0), 0) << "the held chunk arrived before the later one";
    proxy.set_fault(NetworkFault::kNone);  // the held chunk keeps its due time
    EXPECT_EQ(read_n(a, 5, 20s), "first");
    ::close(a);
    ::close(b);
  }
}

TEST(FaultProxy, RefusesATargetThatIsNotAnIpv4Address) {
  EXPECT_THROW(FaultProxy("db.example", 5432), std::runtime_error);
}

}  // namespace
}  // namespace fencelock::torture
