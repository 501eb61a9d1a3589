#include "torture/fault_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <deque>
#include <list>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include "core/mutex.h"

#include "core/errno_text.h"

namespace fencelock::torture {

namespace {

using Clock = std::chrono::steady_clock;

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Closes with RST instead of FIN: the peer sees "connection reset", as after a crash.
void reset_and_close(int fd) {
  linger hard{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
  ::close(fd);
}

struct Chunk {
  Clock::time_point due;
  std::string bytes;
};

// One direction of a connection pair: bytes read from `from`, waiting to be written to `to`.
struct Flow {
  int from = -1;
  int to = -1;
  std::deque<Chunk> pending;
  bool from_closed = false;
};

struct Pair {
  Flow up;    // client -> server
  Flow down;  // server -> client
  bool dead = false;
};

}  // namespace

struct FaultProxy::Impl {
  std::string host;
  std::uint16_t target_port = 0;
  int listener = -1;
  std::uint16_t port = 0;
  int wake[2] = {-1, -1};
  fencelock::detail::Mutex mu;
  NetworkFault fault FENCELOCK_GUARDED_BY(mu) = NetworkFault::kNone;
  std::chrono::milliseconds delay FENCELOCK_GUARDED_BY(mu){0};
  bool delay_one_left FENCELOCK_GUARDED_BY(mu) = false;  // a kDelayOne chunk still to hold
  std::atomic<bool> stopping{false};
  std::atomic<std::uint64_t> actions{0};
  std::list<Pair> pairs;  // owned by the loop thread
  std::thread loop;

  int connect_target() {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(target_port);
    ::inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd);
      return -1;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    set_nonblocking(fd);
    return fd;
  }

  void accept_one() {
    int client = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) return;
    NetworkFault now;
    {  // the fault as it is now, not as it was when this loop iteration began
      fencelock::detail::MutexLock lock(mu);
      now = fault;
    }
    if (now == NetworkFault::kDrop) {
      reset_and_close(client);
      actions++;
      return;
    }
    int server = connect_target();
    if (server < 0) {
      reset_and_close(client);
      return;
    }
    int one = 1;
    ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    set_nonblocking(client);
    Pair pair;
    pair.up.from = client, pair.up.to = server;
    pair.down.from = server, pair.down.to = client;
    pairs.push_back(std::move(pair));
  }

  void read_into(Flow& flow, Clock::time_point due, bool delayed, Pair& pair) {
    char buf[65536];
    ssize_t n = ::read(flow.from, buf, sizeof buf);
    if (n > 0) {
      flow.pending.push_back({due, std::string(buf, static_cast<std::size_t>(n))});
      if (delayed) actions++;
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      flow.from_closed = true;
      if (flow.pending.empty()) pair.dead = true;
    }
  }

  static void write_due(Flow& flow, Clock::time_point now, Pair& pair) {
    while (!flow.pending.empty() && flow.pending.front().due <= now) {
      std::string& bytes = flow.pending.front().bytes;
      ssize_t n = ::send(flow.to, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) return;
        pair.dead = true;
        return;
      }
      bytes.erase(0, static_cast<std::size_t>(n));
      if (!bytes.empty()) return;
      flow.pending.pop_front();
    }
    if (flow.pending.empty() && flow.from_closed) pair.dead = true;
  }

  void close_pair(Pair& pair, bool hard) {
    for (int fd : {pair.up.from, pair.up.to}) hard ? reset_and_close(fd) : (void)::close(fd);
  }

  void run() {
    NetworkFault previous = NetworkFault::kNone;
    while (!stopping.load()) {
      NetworkFault now_fault;
      std::chrono::milliseconds now_delay;
      {
        fencelock::detail::MutexLock lock(mu);
        now_fault = fault;
        now_delay = delay;
      }
      if (now_fault == NetworkFault::kDrop) {
        actions += pairs.size();
        for (auto& pair : pairs) close_pair(pair, /*hard=*/true);
        pairs.clear();
      }
      if (now_fault == NetworkFault::kBlackhole && previous != NetworkFault::kBlackhole) {
        actions += pairs.size();
      }
      previous = now_fault;
      // A black hole polls neither the connections nor the listener: new connections wait in
      // the kernel's accept queue, established ones keep their bytes in the kernel's buffers.
      const bool flowing = now_fault != NetworkFault::kBlackhole;
      std::vector<pollfd> fds = {{wake[0], POLLIN, 0}, {flowing ? listener : -1, POLLIN, 0}};
      std::vector<std::pair<Flow*, Pair*>> flows;
      Clock::time_point next_due = Clock::time_point::max();
      for (auto& pair : pairs) {
        if (!flowing) break;
        for (Flow* flow : {&pair.up, &pair.down}) {
          short events = 0;
          if (!flow->from_closed) events |= POLLIN;
          if (!flow->pending.empty()) {
            if (flow->pending.front().due <= Clock::now()) {
              events |= POLLOUT;
            } else {
              next_due = std::min(next_due, flow->pending.front().due);
            }
          }
          // A closed side (from_closed) must not be polled: POLLHUP would never stop.
          fds.push_back(
              {flow->from_closed ? -1 : flow->from, static_cast<short>(events & POLLIN), 0});
          fds.push_back({flow->to, static_cast<short>(events & POLLOUT), 0});
          flows.emplace_back(flow, &pair);
        }
      }
      int timeout = 200;
      if (next_due != Clock::time_point::max()) {
        auto wait = std::chrono::ceil<std::chrono::milliseconds>(next_due - Clock::now());
        timeout = static_cast<int>(std::clamp<long>(wait.count(), 0, 200));
      }
      if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) break;
      if (fds[0].revents & POLLIN) {
        char drain[64];
        while (::read(wake[0], drain, sizeof drain) > 0) {
        }
      }
      if (fds[1].revents & POLLIN) accept_one();
      const Clock::time_point now = Clock::now();
      for (std::size_t i = 0; i < flows.size(); ++i) {
        auto [flow, pair] = flows[i];
        const pollfd& in = fds[2 + 2 * i];
        const pollfd& out = fds[3 + 2 * i];
        if (in.revents & (POLLIN | POLLHUP | POLLERR)) {
          // The fault as it is now (set_fault() may have woken this poll), not as it was when
          // the iteration began.
          bool hold = false;
          {
            fencelock::detail::MutexLock lock(mu);
            if (fault == NetworkFault::kLatency) {
              hold = delay.count() > 0;
            } else if ((fault == NetworkFault::kDelayOneRequest && flow == &pair->up) ||
                       (fault == NetworkFault::kDelayOneReply && flow == &pair->down)) {
              hold = std::exchange(delay_one_left, false);
            }
            now_delay = delay;
          }
          read_into(*flow, hold ? now + now_delay : now, hold, *pair);
        }
        if (out.revents & (POLLHUP | POLLERR)) pair->dead = true;
        write_due(*flow, now, *pair);
      }
      for (auto it = pairs.begin(); it != pairs.end();) {
        if (it->dead) {
          close_pair(*it, /*hard=*/false);
          it = pairs.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto& pair : pairs) close_pair(pair, /*hard=*/true);
    pairs.clear();
  }
};

FaultProxy::FaultProxy(std::string target_host, std::uint16_t target_port)
    : impl_(std::make_unique<Impl>()) {
  impl_->host = std::move(target_host);
  impl_->target_port = target_port;
  in_addr target{};
  if (::inet_pton(AF_INET, impl_->host.c_str(), &target) != 1) {
    throw std::runtime_error("fault proxy: '" + impl_->host +
                             "' is not an IPv4 address (give the servers by address)");
  }
  impl_->listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (impl_->listener < 0 ||
      ::bind(impl_->listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(impl_->listener, 128) != 0 ||
      ::getsockname(impl_->listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      ::pipe2(impl_->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    const std::string why = detail::errno_text(errno);
    if (impl_->listener >= 0) ::close(impl_->listener);
    throw std::runtime_error("fault proxy: cannot listen on 127.0.0.1: " + why);
  }
  set_nonblocking(impl_->listener);
  impl_->port = ntohs(addr.sin_port);
  impl_->loop = std::thread([impl = impl_.get()] { impl->run(); });
}

FaultProxy::~FaultProxy() {
  impl_->stopping = true;
  ssize_t ignored = ::write(impl_->wake[1], "x", 1);
  (void)ignored;
  impl_->loop.join();
  ::close(impl_->listener);
  ::close(impl_->wake[0]);
  ::close(impl_->wake[1]);
}

std::uint16_t FaultProxy::port() const { return impl_->port; }

std::uint64_t FaultProxy::fault_actions() const { return impl_->actions.load(); }

void FaultProxy::set_fault(NetworkFault fault, std::chrono::milliseconds delay) {
  {
    fencelock::detail::MutexLock lock(impl_->mu);
    impl_->fault = fault;
    const bool delays = fault == NetworkFault::kLatency ||
                        fault == NetworkFault::kDelayOneRequest ||
                        fault == NetworkFault::kDelayOneReply;
    impl_->delay = delays ? delay : std::chrono::milliseconds(0);
    impl_->delay_one_left =
        fault == NetworkFault::kDelayOneRequest || fault == NetworkFault::kDelayOneReply;
  }
  ssize_t ignored = ::write(impl_->wake[1], "x", 1);
  (void)ignored;
}

}  // namespace fencelock::torture
