// The shared register of a torture run: one integer that workers read-modify-write inside their
// critical sections, served by the orchestrator on a Unix socket and guarded by a FenceGate
// (fence.h) as --fence says: full (every read and write presents the worker's token; a read
// admits it too, so a holder that read before a newer holder's read cannot write afterwards),
// write-only (reads unguarded, as with an unfenced read of a RedisFence: the lost update must then
// show), or none (the broken variant). The register is also the run's recorder with one clock:
// workers tell it when they start, when they ask for the lock and what they were granted, and it
// sees the critical sections themselves (ENTER .. EXIT) whatever the fence decides.
//
// Protocol, one line per request and reply; every request carries the worker's own steady and
// wall clocks when it sent it (C = "<steady_ns> <wall_ns>"), so that clock faults can be seen:
//   HELLO <worker> C <pid>            -> OK   (first line of every connection)
//   ACQUIRE <worker> C                -> OK   (before each acquire() call)
//   GRANT <worker> C <token>          -> OK   (acquire() returned this token)
//   ENTER <worker> C <token>          -> OK <value> | STALE <highest>
//   WRITE <worker> C <token> <value>  -> OK | STALE <highest>
//   EXIT <worker> C <token>           -> OK
//   TICK <worker> C                   -> OK   (every 200 ms by the worker's clock: its rate)
// A connection that closes (a killed worker) leaves its critical section (a kLeave event).
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
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "fencelock/fence.h"
#include "torture/events.h"

namespace fencelock::torture {

Nanos monotonic_now();

class SharedRegister {
 public:
  // Listens on the Unix socket `path` (which must not exist). Throws std::runtime_error.
  SharedRegister(std::string path, FenceMode mode);
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
  // A worker that has read and not yet written, if any, other than `except`.
  std::optional<int> worker_between_read_and_write(std::optional<int> except = {}) const;
  // Whether the process `pid` has said HELLO.
  bool has_said_hello(long pid) const;

 private:
  struct Connection {
    std::optional<int> worker;
    long pid = 0;
  };
  // The reply to one request line (the connection threads call it).
  std::string handle(const std::string& line, Connection& connection);
  // A connection closed: its process leaves the critical section.
  void leave(const Connection& connection);

  void accept_loop();
  void serve(int fd);

  const std::string path_;
  const FenceMode mode_;
  int listener_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;

  mutable fencelock::detail::Mutex mu_;
  FenceGate gate_;
  std::uint64_t value_ FENCELOCK_GUARDED_BY(mu_) = 0;
  struct Inside {
    int worker = 0;
    int open = 0;               // open critical sections
    bool read_pending = false;  // read, has not written yet
  };
  std::map<long, Inside> inside_ FENCELOCK_GUARDED_BY(mu_);  // by process id
  std::vector<long> hellos_ FENCELOCK_GUARDED_BY(mu_);       // processes that said HELLO
  std::vector<RegisterEvent> events_ FENCELOCK_GUARDED_BY(mu_);
  std::vector<int> connections_ FENCELOCK_GUARDED_BY(mu_);
  std::vector<std::thread> servers_ FENCELOCK_GUARDED_BY(mu_);
};

// A worker's side of the protocol: one blocking connection; requests are serialized, so a
// ticker thread may send TICK while the main thread waits in acquire().
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
  void hello(int worker, long pid);
  void acquiring(int worker);
  void granted(int worker, std::uint64_t token);
  Reply enter(int worker, std::uint64_t token);
  Reply write(int worker, std::uint64_t token, std::uint64_t value);
  void exit(int worker, std::uint64_t token);
  void tick(int worker);

 private:
  std::string request(const std::string& line);
  fencelock::detail::Mutex mu_;
  int fd_ = -1;
  std::string buffer_;
};

}  // namespace fencelock::torture
