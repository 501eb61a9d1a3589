// FaultProxy: a TCP proxy on 127.0.0.1 that sits between clients and one server and injects
// network faults on command: added latency, dropped connections, and a black hole (connections
// stay open, nothing flows, as in a partition). Used by `fencelock torture` and by the tests.
//
// Faults (set_fault): kNone forwards bytes as they come. kLatency holds every chunk for `delay`
// before forwarding it (both directions). kDrop resets every open connection and every new one
// at once (a crashed or restarted server, as the client sees it). kBlackhole stops reading from
// either side: bytes wait in the kernel's buffers and flow again when the fault is lifted, as
// with a partition that heals before TCP gives up. kDelayOneRequest (kDelayOneReply) holds the
// next chunk a client sends (a server answers) on one connection for `delay`, and what follows it
// on that connection waits behind it as TCP would; every other connection flows: a release or a
// renewal reply that arrives after later commands of other clients (reordering, not latency).
//
// Concurrency mechanism: one thread running a poll() loop over the listening socket and every
// connection pair (non-blocking sockets); set_fault() wakes it through a pipe.
//
// Thread-safety: set_fault() and port() may be called from any thread; the destructor stops the
// thread and closes every socket.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace fencelock::torture {

enum class NetworkFault { kNone, kLatency, kDrop, kBlackhole, kDelayOneRequest, kDelayOneReply };

class FaultProxy {
 public:
  // Listens on an ephemeral loopback port and forwards to target_host:target_port.
  // Throws std::runtime_error when the listening socket cannot be opened.
  FaultProxy(std::string target_host, std::uint16_t target_port);
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  std::uint16_t port() const;
  // `delay` applies to kLatency and the kDelayOne faults.
  void set_fault(NetworkFault fault,
                 std::chrono::milliseconds delay = std::chrono::milliseconds(0));
  // How often a fault has acted since the proxy started: chunks held back by kLatency,
  // connections reset or refused by kDrop, open connections frozen when a kBlackhole began, the
  // chunk held by a kDelayOne fault. The
  // torture tester's evidence that a network fault took effect.
  std::uint64_t fault_actions() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace fencelock::torture
