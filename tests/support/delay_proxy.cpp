#include "support/delay_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <list>
#include <stdexcept>
#include <vector>

#include "core/errno_text.h"

namespace fencelock::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Writes all of `data` to a blocking socket; false if the peer is gone.
bool write_all(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

int connect_to(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  const int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// One proxied connection.
struct Pair {
  int client = -1;
  int server = -1;
  struct Chunk {
    Clock::time_point due;
    std::string bytes;
    bool held;
  };
  std::deque<Chunk> pending;  // client bytes not yet sent to the server, in order
  bool client_done = false;   // the client closed or reset its side
  int awaiting = 0;           // held chunks sent to the server, not answered yet
  bool http2 = false;         // client bytes are HTTP/2 frames; RST_STREAM ones are dropped
  std::string partial;        // HTTP/2: the client bytes of a frame not complete yet
  bool preface_seen = false;  // HTTP/2: the client's 24-byte connection preface went through
  std::string replacement;    // what the server's next bytes are replaced by (replace_reply)
  bool replace_next = false;
};

// HTTP/2 with prior knowledge (gRPC without TLS): the client's preface, then frames of a 9-byte
// header (24-bit length, type, flags, stream id) and a payload. Takes the complete frames out of
// `pair.partial`, all but RST_STREAM (type 3), which a client sends to cancel a call.
std::string complete_frames_without_resets(Pair& pair) {
  constexpr std::size_t kPreface = 24;
  constexpr std::size_t kHeader = 9;
  constexpr unsigned char kRstStream = 3;
  std::string out;
  std::size_t at = 0;
  if (!pair.preface_seen) {
    if (pair.partial.size() < kPreface) return out;
    out.append(pair.partial, 0, kPreface);
    at = kPreface;
    pair.preface_seen = true;
  }
  while (pair.partial.size() - at >= kHeader) {
    const auto byte = [&](std::size_t i) {
      return static_cast<unsigned char>(pair.partial[at + i]);
    };
    const std::size_t length = (static_cast<std::size_t>(byte(0)) << 16) |
                               (static_cast<std::size_t>(byte(1)) << 8) | byte(2);
    if (pair.partial.size() - at < kHeader + length) break;
    if (byte(3) != kRstStream) out.append(pair.partial, at, kHeader + length);
    at += kHeader + length;
  }
  pair.partial.erase(0, at);
  return out;
}

}  // namespace

std::unique_ptr<DelayProxy> DelayProxy::start(std::uint16_t target_port) {
  std::unique_ptr<DelayProxy> proxy(new DelayProxy());
  proxy->listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (proxy->listener_ < 0 ||
      ::bind(proxy->listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(proxy->listener_, 64) != 0 ||
      ::getsockname(proxy->listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      ::pipe2(proxy->wake_, O_CLOEXEC) != 0) {
    throw std::runtime_error("DelayProxy: cannot listen: " + detail::errno_text(errno));
  }
  proxy->port_ = ntohs(addr.sin_port);
  proxy->thread_ = std::thread([p = proxy.get(), target_port] {
    std::list<Pair> storage;
    for (;;) {
      std::vector<pollfd> fds = {{p->wake_[0], POLLIN, 0}, {p->listener_, POLLIN, 0}};
      std::vector<std::pair<Pair*, bool>> who;  // (pair, is client side)
      Clock::time_point next_due = Clock::time_point::max();
      for (Pair& pair : storage) {
        if (!pair.client_done && pair.client >= 0) {
          fds.push_back({pair.client, POLLIN, 0});
          who.emplace_back(&pair, true);
        }
        if (pair.server >= 0) {
          fds.push_back({pair.server, POLLIN, 0});
          who.emplace_back(&pair, false);
        }
        if (!pair.pending.empty()) next_due = std::min(next_due, pair.pending.front().due);
      }
      int timeout = -1;
      if (next_due != Clock::time_point::max()) {
        timeout = static_cast<int>(std::max<long long>(
            0, std::chrono::ceil<std::chrono::milliseconds>(next_due - Clock::now()).count()));
      }
      if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) return;
      if (fds[0].revents != 0) break;  // stop
      if (fds[1].revents & POLLIN) {
        const int client = ::accept4(p->listener_, nullptr, nullptr, SOCK_CLOEXEC);
        if (client >= 0) {
          const int server = connect_to(target_port);
          if (server < 0) {
            ::close(client);
          } else {
            Pair& pair = storage.emplace_back();
            pair.client = client;
            pair.server = server;
            std::lock_guard<std::mutex> lock(p->mu_);
            pair.http2 = p->drop_resets_;
          }
        }
      }
      for (std::size_t k = 2; k < fds.size(); ++k) {
        if (fds[k].revents == 0) continue;
        auto [pair, client_side] = who[k - 2];
        char buf[65536];
        if (client_side) {
          const ssize_t n = ::recv(pair->client, buf, sizeof buf, 0);
          if (n <= 0) {
            pair->client_done = true;  // keep delivering what is pending
            continue;
          }
          std::string bytes(buf, static_cast<std::size_t>(n));
          if (pair->http2) {
            pair->partial += bytes;
            bytes = complete_frames_without_resets(*pair);
            if (bytes.empty()) continue;
          }
          std::lock_guard<std::mutex> lock(p->mu_);
          if (!p->reset_marker_.empty() && bytes.find(p->reset_marker_) != std::string::npos) {
            // Nothing of it reaches the server: both sides are closed at once.
            ::close(pair->client);
            pair->client = -1;
            ::close(pair->server);
            pair->server = -1;
            pair->pending.clear();
            p->resets_++;
            p->changed_.notify_all();
            continue;
          }
          if (!p->replace_marker_.empty() && bytes.find(p->replace_marker_) != std::string::npos) {
            pair->replace_next = true;
            pair->replacement = std::move(p->replacement_);
            p->replace_marker_.clear();  // once
          }
          const bool match = !p->marker_.empty() && bytes.find(p->marker_) != std::string::npos;
          Clock::time_point due = Clock::now();
          if (match) {
            due += p->delay_;
            p->held_++;
            p->changed_.notify_all();
          }
          // Order is kept: nothing overtakes what is held.
          if (!pair->pending.empty()) due = std::max(due, pair->pending.back().due);
          pair->pending.push_back({due, std::move(bytes), match});
        } else {
          const ssize_t n = ::recv(pair->server, buf, sizeof buf, 0);
          if (n <= 0) {
            ::close(pair->server);
            pair->server = -1;
            pair->pending.clear();
            if (pair->client >= 0) ::close(pair->client);
            pair->client = -1;
            continue;
          }
          if (pair->awaiting > 0) {
            std::lock_guard<std::mutex> lock(p->mu_);
            p->answered_late_ += pair->awaiting;
            pair->awaiting = 0;
            p->changed_.notify_all();
          }
          std::string reply(buf, static_cast<std::size_t>(n));
          if (pair->replace_next) {
            reply = std::move(pair->replacement);
            pair->replace_next = false;
            std::lock_guard<std::mutex> lock(p->mu_);
            p->replaced_++;
            p->changed_.notify_all();
          }
          if (pair->client >= 0 && !pair->client_done && !write_all(pair->client, reply)) {
            pair->client_done = true;
          }
        }
      }
      // Deliver what is due, in order.
      const Clock::time_point now = Clock::now();
      for (Pair& pair : storage) {
        while (pair.server >= 0 && !pair.pending.empty() && pair.pending.front().due <= now) {
          if (!write_all(pair.server, pair.pending.front().bytes)) break;
          if (pair.pending.front().held) pair.awaiting++;
          pair.pending.pop_front();
        }
        // The client is gone and everything was delivered: half-close, so that the server sees
        // the end after the last command (and still answers it).
        if (pair.client_done && pair.pending.empty() && pair.client >= 0) {
          ::close(pair.client);
          pair.client = -1;
          if (pair.server >= 0) ::shutdown(pair.server, SHUT_WR);
        }
      }
      storage.remove_if([](const Pair& pair) { return pair.server < 0 && pair.client < 0; });
    }
    for (Pair& pair : storage) {
      if (pair.client >= 0) ::close(pair.client);
      if (pair.server >= 0) ::close(pair.server);
    }
  });
  return proxy;
}

DelayProxy::~DelayProxy() {
  if (wake_[1] >= 0) {
    const char stop = 's';
    (void)!::write(wake_[1], &stop, 1);
  }
  if (thread_.joinable()) thread_.join();
  for (int fd : {listener_, wake_[0], wake_[1]}) {
    if (fd >= 0) ::close(fd);
  }
}

void DelayProxy::delay(std::string marker, std::chrono::milliseconds by) {
  std::lock_guard<std::mutex> lock(mu_);
  marker_ = std::move(marker);
  delay_ = by;
}

int DelayProxy::answered_late() const {
  std::lock_guard<std::mutex> lock(mu_);
  return answered_late_;
}

bool DelayProxy::wait_answered_late(int n, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return changed_.wait_for(lock, timeout, [&] { return answered_late_ >= n; });
}

bool DelayProxy::wait_held(int n, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return changed_.wait_for(lock, timeout, [&] { return held_ >= n; });
}

void DelayProxy::reset_on(std::string marker) {
  std::lock_guard<std::mutex> lock(mu_);
  reset_marker_ = std::move(marker);
}

int DelayProxy::resets() const {
  std::lock_guard<std::mutex> lock(mu_);
  return resets_;
}

void DelayProxy::drop_http2_resets() {
  std::lock_guard<std::mutex> lock(mu_);
  drop_resets_ = true;
}

void DelayProxy::replace_reply(std::string marker, std::string reply) {
  std::lock_guard<std::mutex> lock(mu_);
  replace_marker_ = std::move(marker);
  replacement_ = std::move(reply);
}

int DelayProxy::replaced() const {
  std::lock_guard<std::mutex> lock(mu_);
  return replaced_;
}

bool DelayProxy::wait_replaced(int n, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return changed_.wait_for(lock, timeout, [&] { return replaced_ >= n; });
}

int DelayProxy::held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_;
}

}  // namespace fencelock::testing
