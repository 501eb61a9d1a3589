// Connection: one non-blocking TCP connection to a Redis server, fencelock's own socket layer
// under hiredis's RESP reader and formatter (hiredis's blocking I/O is not used: its timeouts
// bound each read, not a call, and its writes block on a full socket).
//
// A Connection never waits. The caller polls fd() for poll_events() and calls on_writable() /
// on_readable() when poll says so; commands are queued already formatted (format_command), and
// replies come out of next_reply() in order. A connection that failed (any error Status from it)
// must be dropped: its stream is no longer in step with its commands.
//
// Thread-safety: one thread at a time.
#pragma once

#include <netdb.h>
#include <poll.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "core/uri.h"
#include "fencelock/status.h"
#include "redis/resp_reader.h"

namespace fencelock::detail::redis {

// An endpoint's addresses (getaddrinfo's list), shared by the connections made to it.
class Addresses {
 public:
  explicit Addresses(addrinfo* list) : list_(list) {}
  ~Addresses() { freeaddrinfo(list_); }
  Addresses(const Addresses&) = delete;
  Addresses& operator=(const Addresses&) = delete;
  const addrinfo* first() const { return list_; }

 private:
  addrinfo* list_;
};
using AddressesPtr = std::shared_ptr<const Addresses>;

// A name lookup of an endpoint running on a thread of its own (getaddrinfo blocks, for as long
// as a name server takes: 10 s and more when it does not answer), so that a caller waits for it
// no longer than its own deadline, and lookups of several instances run at once. A numeric
// address is resolved at once, on the caller's thread. The thread ends on its own when the
// lookup does, whoever still waits.
class Lookup {
 public:
  static std::shared_ptr<Lookup> start(const Endpoint& endpoint);
  // The addresses, once the lookup ended; kUnavailable when the name did not resolve,
  // kDeadlineExceeded when it had not by `deadline` (the lookup goes on).
  Result<AddressesPtr> wait(std::chrono::steady_clock::time_point deadline);
  bool done();

 private:
  std::mutex mu_;
  std::condition_variable finished_;
  std::optional<Result<AddressesPtr>> result_;
  std::string address_;
};

class Connection {
 public:
  // Starts a non-blocking connect to the first of `addresses` (the next ones are tried in turn
  // when one refuses); `address` names the endpoint in messages. kUnavailable when no socket
  // can be made.
  static Result<std::unique_ptr<Connection>> start(AddressesPtr addresses, std::string address);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  int fd() const { return fd_; }
  // "127.0.0.1:7001" (or "[::1]:7001").
  const std::string& address() const { return address_; }
  // Whether the TCP connect has not completed yet.
  bool connecting() const { return connecting_; }
  // Whether anything waits to be written (or the connect to complete).
  bool wants_write() const { return connecting_ || written_ < out_.size(); }
  // The events to poll fd() for.
  short poll_events() const {
    return static_cast<short>(connecting_ ? POLLOUT : (POLLIN | (wants_write() ? POLLOUT : 0)));
  }

  // Appends a formatted command to what will be written.
  void queue(std::string_view command);
  // After poll reported fd() writable (or an error): completes the connect, or writes as much
  // as the socket takes without blocking. kUnavailable when the connect or the write failed.
  Status on_writable();
  // After poll reported fd() readable (or an error): reads what is there into the reader.
  // kUnavailable when the server closed the connection or sent what the reader refuses.
  Status on_readable();
  // The next complete reply, or null when it has not arrived yet. Not OK (kUnavailable, naming
  // this connection's server) when the reader refuses what the server sent.
  Result<Reply> next_reply();
  // Makes the close a reset (SO_LINGER 0): the kernel drops what it had not sent yet and stops
  // retransmitting, so no command of this connection reaches the server after a partition
  // heals. What the server already received may still run.
  void abort();

 private:
  Connection() = default;
  // Starts connecting to the address at next_; kUnavailable when none is left.
  Status connect_next();

  AddressesPtr addresses_;
  const addrinfo* next_ = nullptr;
  std::string address_;
  std::string last_error_;  // the last connect error, for the message when no address is left
  int fd_ = -1;
  bool connecting_ = false;
  std::string out_;
  std::size_t written_ = 0;
  RespReader reader_;
};

using ConnectionPtr = std::unique_ptr<Connection>;

}  // namespace fencelock::detail::redis
