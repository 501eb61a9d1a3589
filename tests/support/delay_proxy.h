// A TCP proxy on loopback for fault tests: it forwards every connection to a target port, and
// holds back, for a set time, the client's bytes of a read that contains a marker (and, in order,
// every byte after them on that connection). What it holds it delivers even after the client
// closed or reset its side, as a slow network or middlebox would: a command sent on a connection
// the client gave up on still reaches the server, late (docs/PROTOCOLS.md, "Late attempts").
//
// Why not torture's FaultProxy (tools/fencelock/torture/fault_proxy.h): it holds the next chunk
// of any connection, not a chosen command, and drops what it holds when the client resets its
// connection, which is exactly when a late command must still arrive here.
//
// Thread-safety: every member may be called from any thread; one thread of its own does the
// forwarding.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace fencelock::testing {

class DelayProxy {
 public:
  // Listens on a free loopback port and forwards to 127.0.0.1:target_port. Throws
  // std::runtime_error if it cannot listen.
  static std::unique_ptr<DelayProxy> start(std::uint16_t target_port);
  ~DelayProxy();  // stops the thread and closes every connection
  DelayProxy(const DelayProxy&) = delete;
  DelayProxy& operator=(const DelayProxy&) = delete;

  std::uint16_t port() const { return port_; }

  // From now on, a client read that contains `marker` is held for `by` (an empty marker: none).
  void delay(std::string marker, std::chrono::milliseconds by);
  // How many held reads were delivered to the target and answered by it (it sent bytes back on
  // that connection after them).
  int answered_late() const;
  // Waits until answered_late() >= n, or `timeout` passed (false).
  bool wait_answered_late(int n, std::chrono::milliseconds timeout) const;
  // How many reads were held so far.
  int held() const;
  // Waits until held() >= n, or `timeout` passed (false).
  bool wait_held(int n, std::chrono::milliseconds timeout) const;

  // From now on, a client read that contains `marker` ends its connection: nothing of it
  // reaches the target, and both sides are closed at once (an empty marker: none). The client
  // sees its connection reset and can connect again.
  void reset_on(std::string marker);
  // How many connections reset_on() ended.
  int resets() const;

  // From now on, the first client read that contains `marker` has the server's next bytes on
  // its connection replaced by `reply` (once; an empty marker: none): a broken or hostile
  // server's answer to that command.
  void replace_reply(std::string marker, std::string reply);
  // How many replies replace_reply() replaced.
  int replaced() const;
  // Waits until replaced() >= n, or `timeout` passed (false).
  bool wait_replaced(int n, std::chrono::milliseconds timeout) const;

  // For connections accepted from now on: the client speaks HTTP/2 without TLS (gRPC), and
  // its RST_STREAM frames are dropped, so that a call the client gave up on (it sends one at
  // its deadline) still runs when its held request reaches the target late, as it does when
  // the cancel is lost or comes after the server began the call.
  void drop_http2_resets();

 private:
  DelayProxy() = default;

  std::uint16_t port_ = 0;
  int listener_ = -1;
  int wake_[2] = {-1, -1};  // a pipe that ends the loop
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  std::string marker_;
  std::chrono::milliseconds delay_{0};
  int held_ = 0;
  int answered_late_ = 0;
  std::string reset_marker_;
  int resets_ = 0;
  bool drop_resets_ = false;
  std::string replace_marker_;
  std::string replacement_;
  int replaced_ = 0;
  std::thread thread_;
};

}  // namespace fencelock::testing
