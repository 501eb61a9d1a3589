// The shared register of a torture run: one integer that workers read-modify-write inside their
// critical sections, served by the orchestrator on a Unix socket and guarded by a FenceGate
// (fence.h), so that every read and write presents the worker's fencing token. A read admits its
// token too (a fenced read): a holder that read before a newer holder cannot write afterwards.
// The register also sees the critical sections themselves (ENTER .. EXIT), so it counts overlaps
// (two workers inside at once) whatever the fence decides.
//
// Protocol, one line per request and reply:
//   ENTER <worker> <token>          -> OK <value> | STALE <highest>
//   WRITE <worker> <token> <value>  -> OK | STALE <highest>
//   EXIT <worker> <token>           -> OK
// A connection that closes (a killed worker) leaves its critical section.
//
// With fenced = false (the deliberately broken variant of the tests) every read and write is
// applied: the checker must then find the damage.
//
// Concurrency mechanism: one accept thread and one thread per connection (a run has a handful of
// workers); all state under one mutex.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fencelock/fence.h"
#include "torture/events.h"

namespace fencelock::torture {

Nanos monotonic_now();

class SharedRegister {
 public:
  // Listens on the Unix socket `path` (which must not exist). Throws std::runtime_error.
  SharedRegister(std::string path, bool fenced);
  ~SharedRegister();
  SharedRegister(const SharedRegister&) = delete;
  SharedRegister& operator=(const SharedRegister&) = delete;

  const std::string& path() const { return path_; }
  std::vector<RegisterEvent> events() const;
  std::size_t operation_count() const;
  std::uint64_t value() const;
  // A worker inside its critical section now, if any; one that has read and not yet written
  // (where a pause does the most damage) first.
  std::optional<int> worker_inside() const;
  // A worker that has read and not yet written, if any.
  std::optional<int> worker_between_read_and_write() const;

 private:
  // The reply to one request line (the connection threads call it).
  std::string handle(const std::string& line, std::optional<int>& connection_worker);
  // A connection closed: its worker leaves the critical section.
  void leave(int worker);

  void accept_loop();
  void serve(int fd);

  const std::string path_;
  const bool fenced_;
  int listener_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;

  mutable std::mutex mu_;
  FenceGate gate_;
  std::uint64_t value_ = 0;               // GUARDED_BY(mu_)
  std::map<int, int> inside_;             // GUARDED_BY(mu_): worker -> open critical sections
  std::map<int, bool> read_pending_;      // GUARDED_BY(mu_): worker read, has not written yet
  std::vector<RegisterEvent> events_;     // GUARDED_BY(mu_)
  std::vector<int> connections_;          // GUARDED_BY(mu_)
  std::vector<std::thread> servers_;      // GUARDED_BY(mu_)
};

// A worker's side of the protocol: one blocking connection.
class RegisterClient {
 public:
  // Throws std::runtime_error when the socket cannot be reached.
  explicit RegisterClient(const std::string& path);
  ~RegisterClient();
  RegisterClient(const RegisterClient&) = delete;
  RegisterClient& operator=(const RegisterClient&) = delete;

  struct Reply {
    bool ok = false;
    std::uint64_t number = 0;  // OK: the value read (ENTER); STALE: the highest token
  };
  Reply enter(int worker, std::uint64_t token);
  Reply write(int worker, std::uint64_t token, std::uint64_t value);
  void exit(int worker, std::uint64_t token);

 private:
  std::string request(const std::string& line);
  int fd_ = -1;
  std::string buffer_;
};

}  // namespace fencelock::torture
