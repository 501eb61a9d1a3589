// Redis connections for the Redis and Redlock backends: fencelock's own non-blocking sockets
// (socket.h) with hiredis's RESP reader and formatter.
//
// Concurrency mechanism (one for the driver, chosen by measurement: see docs/BENCHMARKS.md):
// connections pooled per instance, and a fan-out that queues a call's commands for every instance
// and then drives every connection from one poll() loop under the call's deadline: writes, new
// connections (connect, AUTH, SELECT, PING, SCRIPT LOAD) and replies of all instances progress
// together, so a stopped or dripping instance delays none of the others and no call outlives its
// deadline. Latency is the slowest needed instance's reply, never the sum. The pub/sub side
// (subscriber.h) is one thread for every instance, which drives its liveness writes as
// PolledCalls.
//
// Thread-safety: Instance and fan_out are safe to use from many threads; a Connection is used by
// one thread at a time (checked out of its Instance's pool).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/backend.h"
#include "core/mutex.h"
#include "core/reconnects.h"
#include "core/uri.h"
#include "fencelock/options.h"
#include "redis/resp_reader.h"
#include "redis/socket.h"

namespace fencelock::detail::redis {

// A RESP-encoded command, formatted once and sent to any number of instances.
std::string format_command(const std::vector<std::string>& args);

// How to reach and log in to one instance.
struct ConnectSpec {
  Endpoint endpoint;
  std::string user;
  std::string password;
  bool has_password = false;
  int db = 0;
  milliseconds connect_timeout{1000};
  std::vector<std::string_view> scripts;  // SCRIPT LOADed on every new connection
};

// The one reading of a redis:// or redlock:// URI's connection parts, for the backends, the fence
// and the benchmarks' baselines: one spec per endpoint with the URI's credentials (else
// FENCELOCK_REDIS_PASSWORD and FENCELOCK_REDIS_USER from the environment) and its database number
// (the path: a whole number >= 0, else kInvalidArgument). Options (the query) are the caller's.
Result<std::vector<ConnectSpec>> connect_specs(const ParsedUri& uri, milliseconds connect_timeout);

// AUTH (when a password is set), SELECT (db != 0), PING and SCRIPT LOAD of spec.scripts: what a
// new connection sends before any command, each to be answered without an error.
std::vector<std::string> setup_commands(const ConnectSpec& spec);

// Opens a connection, then AUTH (when a password is set), SELECT (db != 0), a PING and SCRIPT
// LOAD of spec.scripts (so EVALSHA works after a server restart), all within one deadline: the
// earlier of `deadline` and spec.connect_timeout from now. kUnavailable when the server cannot be
// reached, kDeadlineExceeded when it did not finish in time, kUnauthenticated /
// kPermissionDenied when it refuses the credentials.
// `addresses`: the endpoint's, already looked up (null: looked up here, within the deadline).
Result<ConnectionPtr> open_connection(const ConnectSpec& spec, Clock::time_point deadline,
                                      AddressesPtr addresses = nullptr);

// Sends one command on an open connection and waits for its reply until `deadline`. An error
// reply is a reply (the caller reads it). On any other failure the connection is unusable.
Result<Reply> run_command(Connection& connection, const std::vector<std::string>& args,
                          Clock::time_point deadline);

// Writes everything queued on `connection` until `deadline` (kDeadlineExceeded) or a failure.
Status flush(Connection& connection, Clock::time_point deadline);

// Fencing counters and fence records carry no TTL and must never be evicted: kInvalidArgument,
// naming the policy, when the server's maxmemory-policy evicts keys without a TTL (allkeys-*),
// unless `allow_eviction` (the URI option allow_eviction=true accepts the risk). When CONFIG GET
// is refused (ACL, renamed command) the policy cannot be checked: a warning goes to the log sink
// and the connection is accepted. kUnavailable when the server does not answer by `deadline`.
Status check_eviction_policy(Connection& connection, bool allow_eviction,
                             Clock::time_point deadline);

// Maps a server error reply ("WRONGPASS ...", "NOPERM ...") to a Status.
Status status_from_error_reply(std::string_view text, std::string_view where);

// One Redis instance: a pool of idle connections and a reconnect backoff.
class Instance {
 public:
  explicit Instance(ConnectSpec spec) : spec_(std::move(spec)) {}

  // An idle connection, or a new one (open_connection). While the instance is in reconnect
  // backoff this fails at once with the last error instead of trying again.
  Result<ConnectionPtr> checkout(Clock::time_point deadline);
  // An idle connection, if there is one (never connects).
  std::optional<ConnectionPtr> checkout_idle();
  // For a connection opened by the caller (fan_out opens them in its own loop): not OK while the
  // instance is in reconnect backoff (the last error); else the caller reports the outcome with
  // opened() or open_failed().
  Status may_connect();
  void opened();
  void open_failed(const Status& why);
  // Starts looking the endpoint's name up (Lookup) unless one is running or the addresses were
  // found less than kAddressesFor ago: fan_out starts every instance's before waiting for any.
  void start_lookup();
  // The endpoint's addresses: the cached ones while fresh, else the lookup's (started if need
  // be), waited for until `deadline` at most; the last ones found, if any, while the lookup
  // runs or when it failed.
  Result<AddressesPtr> addresses(Clock::time_point deadline);
  static constexpr std::chrono::seconds kAddressesFor{60};
  // Opens a connection on a thread of its own (within connect_timeout) and puts it in the pool,
  // unless one is being opened already or the instance is in reconnect backoff: a fan-out that
  // has a majority without this instance does not wait for its connect.
  void connect_in_background();
  // Returns a healthy connection to the pool.
  void checkin(ConnectionPtr connection);
  // Records that a connection broke: the next checkout reconnects, with backoff if it fails.
  void note_failure();
  // Drops the idle connections (without counting a failure): the next checkout opens a new one.
  void drop_idle();
  // Records that a connection was closed because the instance did not answer in time (not a
  // failure for ReconnectCounter: a slow server is not a broken one); drops the idle ones.
  void note_unanswered();
  // Whether the instance is known to answer: a connection came back from a call with every reply
  // in time (checkin), and none failed or went unanswered since (an open connection alone does
  // not count: a server slower than a round's grace opens them too). An instance without an idle
  // connection that answers has them all in use by other calls: fan_out connects it within the
  // call instead of leaving it out as reconnecting.
  bool answering() const;

  const ConnectSpec& spec() const { return spec_; }
  // "127.0.0.1:7001" (or "[::1]:7001").
  std::string address() const;
  // Connections opened again after a failure (ReconnectCounter).
  std::uint64_t reconnects() const { return reconnects_.count(); }

 private:
  ConnectSpec spec_;
  ReconnectCounter reconnects_;
  mutable Mutex mu_;
  std::vector<ConnectionPtr> idle_ FENCELOCK_GUARDED_BY(mu_);
  ReconnectBackoff backoff_ FENCELOCK_GUARDED_BY(mu_);
  bool connecting_ FENCELOCK_GUARDED_BY(mu_) = false;  // a background connect is running
  bool answering_ FENCELOCK_GUARDED_BY(mu_) = false;   // see answering()
  AddressesPtr addresses_ FENCELOCK_GUARDED_BY(mu_);   // the last ones found
  Clock::time_point addresses_at_ FENCELOCK_GUARDED_BY(mu_);
  std::shared_ptr<Lookup> lookup_ FENCELOCK_GUARDED_BY(mu_);  // running, or its result not taken
  // Last member: destroyed (joined) first, while everything it uses still exists.
  std::jthread connector_ FENCELOCK_GUARDED_BY(mu_);
};

// One instance's part of a fan-out: commands to send (pipelined) and, after fan_out(), either
// one reply per command or an error.
struct InstanceCall {
  Instance* instance = nullptr;
  std::vector<const std::string*> commands;  // formatted with format_command
  // The replies received, in command order; on an error, those that came before it.
  std::vector<Reply> replies;
  Status error;  // not OK when the instance could not answer every command in time
  // Whether the commands were written to a connection at all (false: no connection, or one was
  // being made in the background): a command never sent cannot run late.
  bool sent = false;
};

// Bounds for a fan-out, besides its deadline.
struct PipelineLimits {
  // An instance that sends no reply for this long fails, as does a connect that takes longer
  // (zero: only the deadline). A busy server that keeps answering runs on until the deadline.
  Clock::duration stall = Clock::duration::zero();
  // Once `enough` instances (a majority) have answered every command, the others fail at
  // `enough_by` (or at once if it has passed), and at most `grace` after that moment, or as long
  // again as the majority took if that is longer (a slow network slows everyone alike): one
  // slow instance cannot hold the round open. With enough < the number of calls, an instance
  // that is not answering() and has no idle connection is connected in the background (and
  // fails this call) when the others are enough without it; one whose connections are all in
  // use by other calls is connected within this call.
  std::size_t enough = 0;
  Clock::time_point enough_by = Clock::time_point::max();
  Clock::duration grace = Clock::duration::max();
};

class Exchange;

// One instance's commands driven by the caller's own poll() loop (the subscriber's liveness
// writes beside its pub/sub connections), on a connection of the caller's own (`own`: taken
// when set, else a new one whose connect, setup and commands progress without blocking, and
// handed back there by finish() when every reply came). The instance's pool is left alone: a
// call that borrowed its idle connection could make a concurrent fan_out count that instance as
// reconnecting and leave it out. The caller polls fd() for poll_events(), passes what poll
// reported to on_events(), calls expire() once its deadline has passed, and finish() once
// active() is false.
class PolledCall {
 public:
  // Not OK (and nothing sent) when the instance is in reconnect backoff, its addresses are not
  // known without waiting (a lookup was started: try again later), or no socket can be made.
  static Result<std::unique_ptr<PolledCall>> start(Instance& instance,
                                                   std::vector<const std::string*> commands,
                                                   ConnectionPtr& own);
  ~PolledCall();
  PolledCall(const PolledCall&) = delete;
  PolledCall& operator=(const PolledCall&) = delete;

  int fd() const;
  short poll_events() const;
  bool active() const;
  void on_events(short revents);
  // Fails the call with kDeadlineExceeded (what had arrived was read).
  void expire();
  // The replies (one per command, errors replies included), or why they did not all come. The
  // connection goes back to `own` when every reply came, else it is closed (and a failure,
  // other than a deadline, counted against the instance). Once only, after active() is false.
  Result<std::vector<Reply>> finish(ConnectionPtr& own);

 private:
  PolledCall(Instance& instance, std::vector<const std::string*> commands);
  Instance& instance_;
  std::vector<const std::string*> commands_;
  std::vector<Reply> replies_;
  std::unique_ptr<Exchange> exchange_;
};

// Sends every call's commands to its instance (an instance without an idle connection gets a
// new one in the same loop), and waits for all replies until `deadline` (and the limits). Writes,
// connects and reads of all instances progress together: none waits for another. Replies that
// arrived before an instance failed stay in its `replies`. A command answered NOSCRIPT (a flushed
// script cache: it did not run) is sent once more on a new connection, which loads the scripts,
// within the same deadline; its new reply takes the NOSCRIPT's place.
void fan_out(std::vector<InstanceCall>& calls, Clock::time_point deadline,
             const PipelineLimits& limits = {});

}  // namespace fencelock::detail::redis
